"""The same rules over a run read back: the payloads the live loggers wrote, per rank and segment."""

from __future__ import annotations

import io
import math
import random
from pathlib import Path
from typing import Any

import orjson

from speedtronic.alerts import NonFinite, Rule, Spike, Threshold, ThroughputDrop
from speedtronic.distributed import RankInfo
from speedtronic.profiling import MetricLogger
from speedtronic.runs.backtest import run_alerts
from tests.helpers import read_jsonl

LOGGER_KEYS = {"event", "elapsed_s", "memory_bytes", "timestamp", "_speedtronic"}


def busy() -> list[Rule]:
    drop = ThroughputDrop(fraction=0.99, consecutive=1, warmup=2)
    return [NonFinite(), Spike(k=1, warmup=3, cooldown=2), drop, Threshold("loss", above=2.5, cooldown=0)]


def write_rank(path: Path, rank: int, seed: int, segments: int = 2) -> None:
    """Two loggers in turn (a run resumed once), each with new rules, as a restarted process has."""
    rng = random.Random(seed)
    step = 0
    for _ in range(segments):
        with MetricLogger(stream=io.StringIO(), json_file=path, rank=RankInfo(rank, 2), lead_rank=None,
                          alerts=busy()) as logger:  # fmt: skip
            logger.emit("train_start", {"start_step": step})
            for _ in range(40):
                step += 1
                loss = math.nan if step == 33 else 2 + rng.gauss(0, 0.3)
                logger.emit("train_step", {"step": step, "loss": loss, "samples_per_s": rng.uniform(50, 100)})
            logger.emit("eval", {"step": step, "loss": math.inf})


def payloads(records: list[dict[str, Any]]) -> list[bytes]:
    return [
        orjson.dumps({k: v for k, v in r.items() if k not in LOGGER_KEYS})
        for r in records
        if r["event"] == "alert"
    ]


def test_run_alerts_re_derives_every_ranks_live_alerts(tmp_path: Path) -> None:
    """Two ranks, each resumed once: run_alerts gives, byte for byte, the payloads each rank wrote
    (rank and world_size included), in file order."""
    path = tmp_path / "metrics.jsonl"
    write_rank(path, 0, seed=1)
    write_rank(path, 1, seed=2)
    live = payloads(read_jsonl(path)) + payloads(read_jsonl(tmp_path / "metrics.rank1.jsonl"))
    derived = [orjson.dumps(payload) for _, payload in run_alerts(tmp_path, busy)]
    assert len(live) > 20
    assert {orjson.loads(p)["rank"] for p in live} == {0, 1}
    assert derived == live
