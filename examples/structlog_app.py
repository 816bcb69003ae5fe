"""An application with its own structlog JSON setup that receives speedtronic's events in its stream.

stdout carries only the application's JSON lines, its own and speedtronic's, each with the request
context the application bound; speedtronic's own text log goes to a file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import structlog

from speedtronic.integrations import StructlogHook
from speedtronic.profiling import MetricLogger


def configure_logging() -> None:
    """The application's logging, as it was before speedtronic came along."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
    )


def main(run_dir: Path = Path("runs/structlog_app")) -> int:
    configure_logging()
    log = structlog.get_logger("app")
    structlog.contextvars.bind_contextvars(job_id="nightly-7")
    log.info("job_started")
    with MetricLogger(file=run_dir / "train.log", every_steps=2, hooks=[StructlogHook()]) as logger:
        for step in range(1, 5):
            logger.emit(
                "train_step",
                {
                    "step": step,
                    "loss": 1.0 / step,
                    "lr": 3e-4,
                    "samples": step * 32,
                    "tokens": step * 512,
                    "microbatches": 1,
                    "samples_per_s": 4_000.0,
                    "tokens_per_s": 64_000.0,
                },
            )
        logger.emit(
            "shape_warning", {"field": "hidden_size", "value": 1000, "alignment": 8, "suggested": 1024}
        )
    log.info("job_finished")
    return 0


if __name__ == "__main__":
    sys.exit(main(*(Path(arg) for arg in sys.argv[1:2])))
