"""What a webhook server that never answers costs the training loop.

    python benchmarks/webhook.py            # the machine, its load, the date, then the figures
    python benchmarks/webhook.py --check    # the same; exits 1 if a goal is missed

Three loggers write the same files side by side: one with a ``WebhookHook`` posting to a server on
127.0.0.1 that accepts each request and never answers, one with a no-op hook, one without hooks. In
interleaved rounds (the order turns each round, as in ``bench.py``) each emits ordinary 6-key
``train_step`` events, then ``alert`` events; each figure is the median over rounds of a difference
measured within one round. Goals (issue 46):

- an alert costs ``emit`` at most 1 ms more with the webhook than without hooks;
- an ordinary event costs 0: the hook's ``on_event`` against a no-op hook's, called directly
  (interleaved too), within 0.5 us. ``emit`` with the webhook against ``emit`` with a no-op hook is
  printed beside it; on a shared machine that difference is noise of a few microseconds either way.
  Any hook costs each event the logger's dispatch (a copy of the payload, a call): printed too.

The hook's worker holds the first alert's post (the server never answers) and queues the rest, so
every alert measured is handed over while a post hangs; the rounds stay within the hook's queue.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from bench import PAYLOAD, noop_hook, rotated  # benchmarks/bench.py, beside this script

from speedtronic.integrations.webhook import WebhookHook
from speedtronic.profiling import MetricLogger

ALERT = {
    "rule": "spike",
    "severity": "warning",
    "key": "loss",
    "step": 120,
    "value": 9.5,
    "threshold": 4.25,
    "message": "loss 9.5 at step 120 is above mean + 6 sigma (4.25)",
    "window": 128,
}


def silent_server() -> tuple[socket.socket, threading.Event]:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers; ``stop`` ends it."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # kept open, never read from or answered
            except TimeoutError:
                continue
        for connection in held:
            connection.close()

    threading.Thread(target=accept, daemon=True).start()
    return server, stop


def per_event_us(logger: MetricLogger, event: str, payload: dict[str, Any], events: int) -> float:
    payloads = [dict(payload, step=i) for i in range(events)]
    emit = logger.emit
    t0 = time.perf_counter()
    for one in payloads:
        emit(event, one)
    return (time.perf_counter() - t0) / events * 1e6


def direct_us(rounds: int, calls: int) -> dict[str, float]:
    """The hook's own ``on_event`` called directly while its worker holds a hung post, and a no-op
    hook's, for an ordinary event and for an alert: medians over interleaved rounds, microseconds."""
    server, stop = silent_server()
    hook = WebhookHook(
        f"http://127.0.0.1:{server.getsockname()[1]}/x", timeout_s=600, queue_size=rounds * calls + 1,
        close_timeout_s=0.1,
    )  # fmt: skip
    cases = {
        ("webhook", "ordinary"): (hook.on_event, "train_step", PAYLOAD),
        ("no-op hook", "ordinary"): (noop_hook, "train_step", PAYLOAD),
        ("webhook", "alert"): (hook.on_event, "alert", ALERT),
    }
    times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
    for r in range(rounds):
        for case in rotated(list(cases), r):
            call, event, payload = cases[case]
            t0 = time.perf_counter()
            for _ in range(calls):
                call(event, payload)
            times[case].append((time.perf_counter() - t0) / calls * 1e6)
    with warnings.catch_warnings(), contextlib.suppress(RuntimeError):
        warnings.simplefilter("ignore")
        hook.close()  # it gives up on the posts (the server never answers): expected
    stop.set()
    server.close()
    ordinary = [
        a - b for a, b in zip(times[("webhook", "ordinary")], times[("no-op hook", "ordinary")], strict=True)
    ]
    return {"ordinary": statistics.median(ordinary), "alert": statistics.median(times[("webhook", "alert")])}


def machine() -> str:
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"{os.cpu_count()} x {platform.machine()} cores, load average {load}; "
        f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--events", type=int, default=5_000, help="ordinary events per round and logger")
    parser.add_argument("--alerts", type=int, default=200, help="alerts per round and logger")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args()
    print(machine())
    server, stop = silent_server()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/services/T/B/token"
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        hook = WebhookHook(url, timeout_s=600, queue_size=args.rounds * args.alerts + 1, close_timeout_s=0.1)
        loggers = {
            "webhook": MetricLogger(file=Path(tmp) / "a.log", json_file=Path(tmp) / "a.jsonl", hooks=[hook]),
            "no-op hook": MetricLogger(
                file=Path(tmp) / "c.log", json_file=Path(tmp) / "c.jsonl", hooks=[noop_hook]
            ),
            "no hook": MetricLogger(file=Path(tmp) / "b.log", json_file=Path(tmp) / "b.jsonl"),
        }
        for r in range(args.rounds):
            for name in rotated(list(loggers), r):
                for kind, event, payload, events in (
                    ("ordinary", "train_step", PAYLOAD, args.events),
                    ("alert", "alert", ALERT, args.alerts),
                ):
                    samples.setdefault((name, kind), []).append(
                        per_event_us(loggers[name], event, payload, events)
                    )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the hook reports the posts it gave up on at close
            for logger in loggers.values():
                logger.close()
    stop.set()
    server.close()
    direct = direct_us(args.rounds, args.alerts)
    in_logger = {
        kind: statistics.median(
            a - b for a, b in zip(samples[("webhook", kind)], samples[(baseline, kind)], strict=True)
        )
        for kind, baseline in (("ordinary", "no-op hook"), ("alert", "no hook"))
    }
    ok_alert = in_logger["alert"] <= 1000.0
    ok_ordinary = direct["ordinary"] <= 0.5
    print(
        f"  {'PASS' if ok_alert else 'MISS'}  an alert, emit with the webhook - without hooks: "
        f"{in_logger['alert']:+.2f} us (goal <= 1000 us); the hook's on_event alone {direct['alert']:.2f} us"
    )
    print(
        f"  {'PASS' if ok_ordinary else 'MISS'}  an ordinary event, the webhook's on_event - a no-op hook's: "
        f"{direct['ordinary']:+.3f} us (goal 0: <= 0.5 us); emit with the webhook - with a no-op hook: "
        f"{in_logger['ordinary']:+.2f} us (the machine's noise)"
    )
    for kind in ("ordinary", "alert"):
        alone = statistics.median(samples[("no hook", kind)])
        dispatch = statistics.median(
            a - b for a, b in zip(samples[("no-op hook", kind)], samples[("no hook", kind)], strict=True)
        )
        print(
            f"        {kind} event: emit {alone:.2f} us without hooks; any hook's dispatch {dispatch:+.2f} us"
        )
    print(
        f"        posts given up at close: {hook.failed}; alerts dropped: {hook.dropped}; sent: {hook.sent}"
    )
    missed = (not ok_alert) + (not ok_ordinary)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
