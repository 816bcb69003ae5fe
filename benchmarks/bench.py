"""speedtronic's performance goals, each measured side by side with its baseline in this process.

    python benchmarks/bench.py            # every goal, with the machine, its load and the date
    python benchmarks/bench.py --check    # the same; exits 1 if a goal is missed
    python benchmarks/bench.py --quick    # fewer rounds and events (a smoke run)

The default TensorboardHook's cost on the training thread has its own script,
benchmarks/tensorboard_hook.py.

Figures are medians of interleaved rounds (candidates alternate within each round, so machine load
hits all of them alike); the ratios, what the goals are stated in, are medians of the ratios within
each round. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import itertools
import logging
import logging.handlers
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import structlog

from speedtronic.processors.enrich import iso_timestamp
from speedtronic.processors.redact import is_secret_key
from speedtronic.processors.text import ValueFormat
from speedtronic.profiling import MetricLogger
from speedtronic.record import empty_note
from speedtronic.runs import read_records

PAYLOAD = {
    "step": 1,
    "loss": 1.2345,
    "lr": 3e-4,
    "grad_norm": 0.5,
    "samples_per_s": 1234.5,
    "microbatches": 4,
}


def noop_hook(event: str, payload: dict[str, Any]) -> None:
    pass


# -- candidates: each is a (setup -> per-event callable, teardown) pair -------------------------


def hand_written(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """A reference loop (not a floor: it writes other bytes): copy, elapsed, text line, orjson line
    with a timestamp, one hook call; no library at all. The same syscalls as speedtronic's: per line a
    ``stat`` of the path (to follow logrotate) and one ``write``."""
    text_path, data_path = d / "hand.log", d / "hand.jsonl"
    text = open(text_path, "a", encoding="utf-8")  # noqa: SIM115  # closed by teardown
    fd = os.open(data_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    start = time.monotonic()

    def emit(payload: dict[str, Any]) -> None:
        record = dict(payload)
        record["elapsed_s"] = round(time.monotonic() - start, 6)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        fields = " ".join(f"{k}={v!r}" for k, v in record.items())
        os.stat(text_path)
        text.write(f"{stamp} | INFO | train_step {fields}\n")
        text.flush()
        os.stat(data_path)
        stamp_iso = iso_timestamp(time.time())
        os.write(fd, orjson.dumps({"event": "train_step", **record, "timestamp": stamp_iso}) + b"\n")
        noop_hook("train_step", record)

    def close() -> None:
        text.close()
        os.close(fd)

    return emit, close


def stdlib_logging(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """The stdlib way, like for like: a text logger and a JSON logger, each with a
    ``logging.handlers.WatchedFileHandler`` (its rule: one ``stat`` of the path before each write, so
    logrotate is followed, as speedtronic does) and a Formatter, then the hook."""

    class JSONFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            stamp = iso_timestamp(record.created)  # the JSON line carries its time, as ours does
            return orjson.dumps(
                {"event": record.msg, **record.payload, "timestamp": stamp}  # type: ignore[attr-defined]
            ).decode()

    text_logger, json_logger = logging.Logger("bench.text"), logging.Logger("bench.json")
    text_handler = logging.handlers.WatchedFileHandler(d / "stdlib.log")
    text_handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(message)s"))
    json_handler = logging.handlers.WatchedFileHandler(d / "stdlib.jsonl")
    json_handler.setFormatter(JSONFormatter())
    text_logger.addHandler(text_handler)
    json_logger.addHandler(json_handler)
    start = time.monotonic()

    def emit(payload: dict[str, Any]) -> None:
        record = dict(payload)
        record["elapsed_s"] = round(time.monotonic() - start, 6)
        text_logger.info("train_step %s", " ".join(f"{k}={v!r}" for k, v in record.items()))
        json_logger.info("train_step", extra={"payload": record})
        noop_hook("train_step", record)

    def close() -> None:
        text_handler.close()
        json_handler.close()

    return emit, close


def stock_chain(wrapped: Any, processors: list[Any]) -> Callable[[dict[str, Any]], None]:
    """``emit`` through a stock structlog chain over ``wrapped``: every chain measured here is bound
    the same way (a filtering bound logger, a plain ``dict`` context)."""
    log = structlog.wrap_logger(
        wrapped,
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(0),
        context_class=dict,
    ).bind()

    def emit(payload: dict[str, Any]) -> None:
        log.info("train_step", **payload)

    return emit


def plain_structlog_chain(
    d: Path, *, watched: bool = False
) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """The chain a user would write with structlog's own parts: elapsed_s, ``TimeStamper``, a
    ``KeyValueRenderer`` line to a ``WriteLogger`` (write and flush per line), the hook, then
    ``JSONRenderer(serializer=orjson.dumps)`` to a ``BytesLogger`` (write and flush per line).

    ``watched=True`` adds what ``logging.handlers.WatchedFileHandler`` does, and speedtronic does too:
    one ``os.stat`` of each file's path before each write (here only the stat, never a reopen)."""
    name = "watched" if watched else "plain"
    text = open(d / f"{name}.log", "a")  # noqa: SIM115  # closed by teardown
    data = open(d / f"{name}.jsonl", "ab")  # noqa: SIM115  # closed by teardown
    text_path, data_path = str(d / f"{name}.log"), str(d / f"{name}.jsonl")
    text_log = structlog.WriteLogger(text)
    key_value = structlog.processors.KeyValueRenderer(key_order=["timestamp", "event"])
    start = time.monotonic()

    def add_elapsed(logger: Any, method_name: str, event_dict: Any) -> Any:
        event_dict["elapsed_s"] = round(time.monotonic() - start, 6)
        return event_dict

    def write_text(logger: Any, method_name: str, event_dict: Any) -> Any:
        if watched:
            os.stat(text_path)
        text_log.msg(key_value(logger, method_name, dict(event_dict)))
        return event_dict

    def call_hook(logger: Any, method_name: str, event_dict: Any) -> Any:
        noop_hook(event_dict["event"], {k: v for k, v in event_dict.items() if k != "event"})
        if watched:
            os.stat(data_path)
        return event_dict

    emit = stock_chain(
        structlog.BytesLogger(data),
        [
            add_elapsed,
            structlog.processors.TimeStamper(fmt="iso", utc=True),  # the JSONL stamped as ours is
            write_text,
            call_hook,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ],
    )

    def close() -> None:
        text.close()
        data.close()

    return emit, close


def watched_structlog_chain(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """The plain chain with WatchedFileHandler's stat before each write."""
    return plain_structlog_chain(d, watched=True)


def bare_stages(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """speedtronic's stages written as lean as they can be, in a stock structlog chain: the cadence
    test, the conversion and redaction walks (``Redact``'s own key rule), elapsed, one timestamp, the
    text line (speedtronic's ``ValueFormat``), the JSONL record with its note, one ``stat`` and one
    ``write(2)`` per line, the hook on a copy. Nothing else: no locks, no line caps, no error
    handling, no rotation-following beyond the stat, no torn-line or partial-write care.

    Not a candidate and not a floor (it writes other bytes: no line caps, no escapes of hostile
    values): a reference for what the stages cost without speedtronic's guarantees."""
    note = orjson.Fragment(orjson.dumps(empty_note()))
    judge = functools.lru_cache(maxsize=4096)(is_secret_key)
    text_path, data_path = str(d / "bare.log"), str(d / "bare.jsonl")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    text_fd, data_fd = os.open(text_path, flags, 0o644), os.open(data_path, flags, 0o644)
    values = ValueFormat()  # the text line's own formatting: keys and values as speedtronic writes them
    plain = (float, int, str, bool, type(None))
    start = time.monotonic()

    def cadence(logger: Any, method_name: str, event_dict: Any) -> Any:
        if event_dict["event"] == "train_step" and event_dict.get("step", 0) % 1:
            raise structlog.DropEvent
        return event_dict

    def convert_and_redact(logger: Any, method_name: str, event_dict: Any) -> Any:
        for key, value in event_dict.items():  # two walks in speedtronic, as here
            if type(value) not in plain:
                event_dict[key] = str(value)
        for key in event_dict:
            if key != "event" and judge(key):
                event_dict[key] = "[REDACTED]"
        return event_dict

    def elapsed_and_time(logger: Any, method_name: str, event_dict: Any) -> Any:
        event_dict["elapsed_s"] = round(time.monotonic() - start, 6)
        event_dict["timestamp"] = iso_timestamp(time.time())
        return event_dict

    def text_line(logger: Any, method_name: str, event_dict: Any) -> Any:
        fields = values.fields(event_dict, ("event", "timestamp"))
        stamp = event_dict["timestamp"]
        line = f"{stamp[:10]} {stamp[11:19]} | INFO | {event_dict['event']}{fields}\n"
        os.stat(text_path)
        os.write(text_fd, line.encode())
        return event_dict

    def record(logger: Any, method_name: str, event_dict: Any) -> Any:
        fields = {"event": event_dict["event"], **event_dict}
        stamp = fields.pop("timestamp")
        fields["_speedtronic"], fields["timestamp"] = note, stamp
        os.stat(data_path)
        os.write(data_fd, orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE))
        return event_dict

    def hook(logger: Any, method_name: str, event_dict: Any) -> Any:
        payload = dict(event_dict)
        noop_hook(payload.pop("event"), payload)
        raise structlog.DropEvent

    emit = stock_chain(
        structlog.ReturnLogger(), [cadence, convert_and_redact, elapsed_and_time, text_line, record, hook]
    )

    def close() -> None:
        os.close(text_fd)
        os.close(data_fd)

    return emit, close


def speedtronic_logger(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """MetricLogger(file, json_file, one no-op hook), default options."""
    logger = MetricLogger(file=d / "st.log", json_file=d / "st.jsonl", hooks=[noop_hook])

    def emit(payload: dict[str, Any]) -> None:
        logger.emit("train_step", payload)

    return emit, logger.close


def speedtronic_skipped(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """A train_step the cadence skips."""
    logger = MetricLogger(
        file=d / "skip.log", json_file=d / "skip.jsonl", hooks=[noop_hook], every_steps=1_000_000
    )
    payload = dict(PAYLOAD, step=3)

    def emit(_: dict[str, Any]) -> None:
        logger.emit("train_step", payload)

    return emit, logger.close


def peer_loggers() -> dict[str, Any]:
    """Lightning's CSVLogger and torchtune's DiskLogger, where installed (not dependencies)."""
    peers: dict[str, Any] = {}
    try:
        from lightning.pytorch.loggers import CSVLogger  # type: ignore[import-not-found]
    except ImportError:
        print("    (Lightning not installed: its CSVLogger is not measured)")
    else:

        def csv_logger(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
            logger = CSVLogger(str(d), name="csv")

            def emit(payload: dict[str, Any]) -> None:
                logger.log_metrics(payload, step=payload["step"])

            def close() -> None:
                logger.save()
                logger.finalize("success")

            return emit, close

        peers["Lightning CSVLogger"] = csv_logger
    try:
        from torchtune.training.metric_logging import DiskLogger  # type: ignore[import-not-found]
    except ImportError:
        print("    (torchtune not installed: its DiskLogger is not measured)")
    else:

        def disk_logger(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
            logger = DiskLogger(str(d))

            def emit(payload: dict[str, Any]) -> None:
                logger.log_dict(payload, step=payload["step"])

            return emit, logger.close

        peers["torchtune DiskLogger"] = disk_logger
    return peers


Samples = dict[str, list[float]]


def rotated(names: list[str], start: int) -> list[str]:
    """``names`` beginning at index ``start`` (mod their number): round ``r`` runs them in this order."""
    start %= len(names)
    return names[start:] + names[:start]


def interleaved(
    candidates: dict[str, Any],
    events: int,
    rounds: int,
    payload: dict[str, Any] | None = None,
    make: Callable[[int], dict[str, Any]] | None = None,
) -> Samples:
    """Microseconds per event of each candidate in each round.

    Every round runs every candidate once, starting one candidate later than the round before
    (``rotated``), so no candidate always runs first.
    """
    samples: Samples = {name: [] for name in candidates}
    with tempfile.TemporaryDirectory() as tmp:
        live = {name: setup(Path(tmp)) for name, setup in candidates.items()}
        for r in range(rounds):
            for name in rotated(list(live), r):
                emit = live[name][0]
                if make is not None:  # built before the clock starts: the logger's cost only
                    payloads = [make(i) for i in range(events)]
                else:
                    payloads = [dict(payload or PAYLOAD, step=i) for i in range(events)]
                t0 = time.perf_counter()
                for payload in payloads:
                    emit(payload)
                samples[name].append((time.perf_counter() - t0) / events * 1e6)
        for _emit, close in live.values():
            close()
    return samples


def ratio(samples: Samples, ours: str, baseline: str) -> float:
    """The median over rounds of ``ours / baseline`` measured in the same round.

    Load on a shared machine comes and goes over seconds, slowing both runs of a round alike; a
    ratio per round cancels that, where a ratio of the two medians would not.
    """
    return statistics.median(a / b for a, b in zip(samples[ours], samples[baseline], strict=True))


# -- goals --------------------------------------------------------------------------------------


class Report:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, bool]] = []

    def goal(self, name: str, measured: str, target: str, ok: bool) -> None:
        self.rows.append((name, measured, target, ok))
        print(f"  {'PASS' if ok else 'MISS'}  {name}: {measured} (goal {target})", flush=True)

    def table(self) -> str:
        lines = ["| goal | measured | target | |", "|---|---|---|---|"]
        lines += [f"| {n} | {m} | {t} | {'pass' if ok else 'MISS'} |" for n, m, t, ok in self.rows]
        return "\n".join(lines)

    def finish(self, check: bool) -> int:
        """Print the machine, the goals' table and those missed; 1 for a miss under ``--check``."""
        print("\n" + machine())
        print("\n" + self.table())
        missed = [name for name, _, _, ok in self.rows if not ok]
        if missed:
            print("\nmissed: " + "; ".join(missed))
        return 1 if missed and check else 0


def goal_full_and_skip(report: Report, events: int, rounds: int) -> None:
    print(f"\n[1, 2] per-event cost (median of {rounds} interleaved rounds x {events} events)")
    samples = interleaved(
        {
            "reference loop": hand_written,
            "stdlib logging (watched)": stdlib_logging,
            "plain structlog chain": plain_structlog_chain,
            "plain chain + stat": watched_structlog_chain,
            "speedtronic": speedtronic_logger,
            "bare stages (reference)": bare_stages,
            "speedtronic skipped step": speedtronic_skipped,
            **peer_loggers(),
        },
        events,
        rounds,
    )
    print(f"    {'':28s} {'median':>8s}    {'/ chain+stat':>12s} {'/ stdlib':>9s}  (per-round ratios)")
    for name, values in samples.items():
        to_watched = ratio(samples, name, "plain chain + stat")
        to_stdlib = ratio(samples, name, "stdlib logging (watched)")
        print(f"    {name:28s} {statistics.median(values):8.2f} µs {to_watched:11.2f}x {to_stdlib:8.2f}x")
    to_watched = ratio(samples, "speedtronic", "plain chain + stat")
    report.goal(
        "full path / plain chain + stat (like for like)", f"{to_watched:.2f}x", "<= 1.0x", to_watched <= 1.0
    )
    to_stdlib = ratio(samples, "speedtronic", "stdlib logging (watched)")
    report.goal(
        "full path / stdlib, two WatchedFileHandlers", f"{to_stdlib:.2f}x", "<= 0.65x", to_stdlib <= 0.65
    )
    print(f"    (stretch: <= 0.6x stdlib: {'met' if to_stdlib <= 0.6 else 'not met'})")
    to_hand = ratio(samples, "speedtronic", "reference loop")
    report.goal("full path / reference loop, same syscalls", f"{to_hand:.2f}x", "<= 3x", to_hand <= 3.0)
    to_plain = ratio(samples, "speedtronic", "plain structlog chain")
    print(f"    (against the plain chain without the stat, which doesn't follow logrotate: {to_plain:.2f}x)")
    bare = ratio(samples, "bare stages (reference)", "plain chain + stat")
    print(
        f"    (speedtronic's stages with none of its guarantees: {bare:.2f}x the chain + stat; "
        f"speedtronic is {ratio(samples, 'speedtronic', 'bare stages (reference)'):.2f}x that)"
    )
    skipped = ratio(samples, "speedtronic skipped step", "speedtronic")
    report.goal("skipped step / full event", f"{skipped:.1%}", "< 8%", skipped < 0.08)


def wide_payloads(keys: int, fresh: bool) -> Callable[[int], dict[str, Any]]:
    """Payload ``i`` of ``keys`` keys (``step`` and float metrics). ``fresh``: its keys built afresh
    with an f-string each step, as a per-layer loop builds them (equal strings, new objects)."""
    names = [f"metric_{k}" for k in range(keys - 1)]
    values = [0.1 * k + 1e-3 for k in range(keys - 1)]
    if fresh:
        return lambda i: {"step": i, **{f"metric_{k}": 0.1 * k + 1e-3 for k in range(keys - 1)}}
    return lambda i: {"step": i, **dict(zip(names, values, strict=True))}


def goal_payload_size(report: Report, events: int, rounds: int) -> None:
    """How the cost grows with the payload: 5 to 1000 float keys, interned and built afresh, for
    speedtronic, the chain + stat, stdlib and the bare stages, each size in its own interleaved rounds."""
    print(f"\n[2b] per-event cost by payload size (median of {rounds} rounds; fewer events for more keys)")
    header = ("keys", "", "speedtronic", "chain+stat", "stdlib", "bare", "/ chain", "/ stdlib", "bare/chain")
    print("    {:>5s} {:6s} {:>12s} {:>11s} {:>9s} {:>9s} {:>8s} {:>9s} {:>11s}".format(*header))
    goals = {200: 0.75, 1000: 0.7}
    for keys in (5, 50, 200, 1000):
        for fresh in (False, True):
            samples = interleaved(
                {
                    "speedtronic": speedtronic_logger,
                    "chain": watched_structlog_chain,
                    "stdlib": stdlib_logging,
                    "bare": bare_stages,
                },
                max(200, events * 5 // keys),
                rounds,
                make=wide_payloads(keys, fresh),
            )
            to_chain = ratio(samples, "speedtronic", "chain")
            to_stdlib = ratio(samples, "speedtronic", "stdlib")
            bare = ratio(samples, "bare", "chain")
            names = ("speedtronic", "chain", "stdlib", "bare")
            medians = [statistics.median(samples[name]) for name in names]
            kind = "fresh" if fresh else "same"
            print(f"    {keys:5d} {kind:6s} {medians[0]:9.1f} µs {medians[1]:8.1f} µs {medians[2]:6.1f} µs "
                  f"{medians[3]:6.1f} µs {to_chain:7.2f}x {to_stdlib:8.2f}x {bare:10.2f}x")  # fmt: skip
            if keys in goals:
                target = goals[keys]
                report.goal(
                    f"{keys}-key float payload ({kind} keys) / chain + stat",
                    f"{to_chain:.2f}x",
                    f"<= {target}x",
                    to_chain <= target,
                )


def layer_payloads(keys: int) -> Callable[[int], dict[str, Any]]:
    """Payload ``i``: ``step`` and ``keys - 1`` per-layer floats named as a model's modules are
    (``layers.12.attn.q_proj.grad_norm``: about 40 bytes of JSON each, so from about 800 keys on the
    record is wider than the 32,000-byte line cap and is written in parts), built afresh each step."""
    return lambda i: {
        "step": i,
        **{f"layers.{k}.attn.q_proj.grad_norm": 0.1 * k + i for k in range(keys - 1)},
    }


def kept_whole(keys: int) -> tuple[int, bool]:
    """How many lines one record of ``keys`` per-layer keys takes in the JSONL, and whether the reader
    gives every value back."""
    payload = layer_payloads(keys)(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.jsonl"
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            logger.emit("train_step", payload)
        (record,) = read_records(path)
        lines = len(path.read_bytes().splitlines())
    return lines, all(record.payload.get(key) == value for key, value in payload.items())


def speedtronic_uncapped(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """MetricLogger(file, json_file, one no-op hook, max_line_bytes=None): lines of any length."""
    logger = MetricLogger(file=d / "nc.log", json_file=d / "nc.jsonl", hooks=[noop_hook], max_line_bytes=None)

    def emit(payload: dict[str, Any]) -> None:
        logger.emit("train_step", payload)

    return emit, logger.close


def wide_floor(d: Path) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """The floor for ``layer_payloads`` (not a candidate: it writes these payloads' bytes and no
    others'): the least code that writes the bytes ``MetricLogger`` writes for them (``floor_bytes``
    checks it) with the same system calls, in a plain loop. The event dict copied (the hooks' copy),
    ``elapsed_s`` and the timestamp; the text line's fields that can begin within the cap formatted by
    one ``str.format`` template per key set, cut after the last that fits, and ``_dropped``; the record
    written by orjson once and cut at its commas into parts of ``event``, ``step``, their fields, the
    note and the timestamp; per line a poll of the file's inotify events (a ``stat`` when they say so)
    and one ``write(2)``; the no-op hook."""
    from speedtronic.processors.render import DEFAULT_MAX_LINE_BYTES
    from speedtronic.sinks import PathEvents

    limit = DEFAULT_MAX_LINE_BYTES - 1
    room = limit - 512  # where a field of the text line must end (the truncation marker's room after)
    files = []
    for name in ("floor.log", "floor.jsonl"):
        path = str(d / name)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        files.append((path, fd, PathEvents.open(fd, path)))
    note = {**empty_note(), "part": 0, "parts": 0}
    widest_note = b'"_speedtronic":' + orjson.dumps({**note, "part": 9_999_999, "parts": 9_999_999})
    templates: dict[tuple[str, ...], tuple[str, int]] = {}  # per key set: its lead's template and size
    start = time.monotonic()

    def write(which: int, data: bytes) -> None:
        path, fd, events = files[which]
        if events is None or events.changed():
            os.stat(path)
        os.write(fd, data)

    def emit(payload: dict[str, Any]) -> None:
        record = dict(payload)
        record["elapsed_s"] = round(time.monotonic() - start, 6)
        stamp = iso_timestamp(time.time())
        keys = tuple(record)
        found = templates.get(keys)
        if found is None:  # fields that can begin within the cap, each value 3 characters at least
            ends = itertools.accumulate(len(key) + 5 for key in keys)
            count = sum(end <= room for end in ends)
            template = "".join(f" {key}={{:{'.4' if key != 'step' else ''}}}" for key in keys[:count])
            found = templates[keys] = template, count
        template, count = found
        head = f"{stamp[:10]} {stamp[11:19]} | INFO | train_step"
        line = head + template.format(*itertools.islice(record.values(), count))
        cut = line.rfind(" ", 0, room + 1)
        dropped = line.count(" ", cut) + len(keys) - count
        line = f'{line[:cut]} _dropped="<truncated: {dropped:,} fields did not fit in {limit + 1:,} bytes>"\n'
        write(0, line.encode())
        data = orjson.dumps(record)
        first = data.find(b",")
        heads = b'"event":"train_step",' + data[1:first]
        fields = data[first + 1 : -1]
        stamp_field = b'"timestamp":"' + stamp.encode() + b'"'
        budget = limit - (len(heads) + len(widest_note) + len(stamp_field) + 4)
        chunks, at = [], 0
        while len(fields) - at > budget:
            end = fields.rfind(b",", at, at + budget + 1)
            chunks.append(fields[at:end])
            at = end + 1
        chunks.append(fields[at:])
        parts = len(chunks)
        write(1, b"\n".join([
            b"".join((b"{", heads, b",", chunk, b',"_speedtronic":',
                      orjson.dumps({**note, "part": part, "parts": parts}), b",", stamp_field, b"}"))
            for part, chunk in enumerate(chunks)
        ]) + b"\n")  # fmt: skip
        noop_hook("train_step", record)

    def close() -> None:
        for _path, fd, events in files:
            os.close(fd)
            if events is not None:
                events.close()

    return emit, close


def floor_bytes(keys: int) -> bool:
    """Whether ``wide_floor`` writes what ``MetricLogger`` writes for ``layer_payloads(keys)``, the
    times (``timestamp``, ``elapsed_s``) aside."""
    times = re.compile(rb'("timestamp":"[^"]*"|"elapsed_s":[0-9.e-]+|^\S+ \S+)', re.MULTILINE)
    payloads = [layer_payloads(keys)(i) for i in range(3)]
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for setup, names in (
            (speedtronic_logger, ("st.log", "st.jsonl")),
            (wide_floor, ("floor.log", "floor.jsonl")),
        ):
            emit, close = setup(Path(tmp))
            for payload in payloads:
                emit(dict(payload))
            close()
            written.append([times.sub(b"", (Path(tmp) / name).read_bytes()) for name in names])
    return written[0] == written[1]


def goal_wide_records(report: Report, events: int, rounds: int) -> None:
    """Records wider than the line cap: written in parts, every field kept, the cost linear in keys;
    against the chain, against speedtronic without a cap (what the parts and the text cut cost), and
    from 1,000 keys (a text line cut) the floor (``wide_floor``: the same bytes, the least code)."""
    rounds = min(rounds, 9)
    print(f"\n[2c] records wider than the line cap (per-layer names; median of {rounds} rounds)")
    print("    {:>5s} {:>6s} {:>5s} {:>12s} {:>11s} {:>11s} {:>8s} {:>10s} {:>11s} {:>13s}".format(
        "keys", "lines", "kept", "speedtronic", "uncapped", "chain+stat", "/ chain", "/ uncapped",
        "µs per key", "floor / chain"))  # fmt: skip
    per_key = {}
    for keys in (800, 1000, 2000, 5000):
        lines, kept = kept_whole(keys)
        floor = keys >= 1000 and floor_bytes(keys)  # measured only where it writes the same bytes
        samples = interleaved(
            {
                "speedtronic": speedtronic_logger,
                "uncapped": speedtronic_uncapped,
                "chain": watched_structlog_chain,
                **({"floor": wide_floor} if floor else {}),
            },
            max(30, events * 2 // keys),
            rounds,
            make=layer_payloads(keys),
        )
        to_chain = ratio(samples, "speedtronic", "chain")
        to_uncapped = ratio(samples, "speedtronic", "uncapped")
        floor_text = f"{ratio(samples, 'floor', 'chain'):12.2f}x" if floor else f"{'-':>13s}"
        ours, uncapped, chain = (
            statistics.median(samples[name]) for name in ("speedtronic", "uncapped", "chain")
        )
        per_key[keys] = ours / keys
        print(f"    {keys:5d} {lines:6d} {'all' if kept else 'NO':>5s} {ours:9.1f} µs {uncapped:8.1f} µs "
              f"{chain:8.1f} µs {to_chain:7.2f}x {to_uncapped:9.2f}x {per_key[keys]:11.3f} "
              f"{floor_text}")  # fmt: skip
        if keys == 1000:
            report.goal(
                f"1000 per-layer keys over the cap ({lines} lines, every field kept) / chain + stat",
                f"{to_chain:.2f}x" + (f" (floor {ratio(samples, 'floor', 'chain'):.2f}x)" if floor else ""),
                "<= 0.7x",
                to_chain <= 0.7 and kept,
            )
    growth = per_key[5000] / per_key[800]
    print(f"    (cost per key at 5,000 keys / at 800: {growth:.2f}x; 1.0x is linear growth)")


def thread_throughput(emit: Callable[[dict[str, Any]], None], events: int) -> float:
    """Four threads' total throughput over one thread's, emitting ``events`` events each way."""

    def run(count: int, first: int) -> None:
        for i in range(first, first + count):
            emit(dict(PAYLOAD, step=i))

    t0 = time.perf_counter()
    run(events, 0)
    one = time.perf_counter() - t0
    threads = [threading.Thread(target=run, args=(events // 4, n * events)) for n in range(4)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return one / (time.perf_counter() - t0)


def goal_threads(report: Report, events: int, rounds: int) -> None:
    """Four threads emitting into one logger against one thread emitting as many events: the total
    throughput, median of per-round ratios (one lock serialises the chain: the goal is no convoy).

    The hand-written loop, the chain + stat and stdlib are measured the same way in each round, in
    turn: every ``stat`` and ``write`` releases the GIL, and a waiting thread takes it, whoever holds a
    lock, so their ratios show what four threads cost any Python code making those system calls."""
    print(f"\n[2c] one logger, 1 thread vs 4 threads ({events} events a round, {rounds} rounds)")
    candidates = {
        "speedtronic": speedtronic_logger,
        "reference loop": hand_written,
        "plain chain + stat": watched_structlog_chain,
        "stdlib logging (watched)": stdlib_logging,
    }
    ratios: Samples = {name: [] for name in candidates}
    with tempfile.TemporaryDirectory() as tmp:
        live = {name: setup(Path(tmp)) for name, setup in candidates.items()}
        for r in range(rounds):
            for name in rotated(list(live), r):
                ratios[name].append(thread_throughput(live[name][0], events))
        for _emit, close in live.values():
            close()
    for name, values in ratios.items():
        print(f"    {name:<28} {statistics.median(values):5.2f}x  (4 threads' throughput / 1 thread's)")
    throughput = statistics.median(ratios["speedtronic"])
    best = max(statistics.median(values) for name, values in ratios.items() if name != "speedtronic")
    print(
        f"    (speedtronic keeps {throughput / best:.2f}x the share of the best of the others: "
        "no convoy of its own)"
    )
    report.goal(
        "4 threads' total throughput / 1 thread's", f"{throughput:.2f}x", ">= 0.9x", throughput >= 0.9
    )


def stage_costs(events: int) -> None:
    """Where an event's time goes: each stage of MetricLogger's chain timed alone, in order, on the
    event dicts the stages before it produced (the files are real; the hook is a no-op)."""
    print(f"\n[3] cost per stage of the chain (median of 5 runs x {events} events)")
    with tempfile.TemporaryDirectory() as tmp:
        logger = MetricLogger(file=Path(tmp) / "s.log", json_file=Path(tmp) / "s.jsonl", hooks=[noop_hook])
        stages = logger.processors
        per_stage: list[list[float]] = [[] for _ in stages]
        for _ in range(5):
            dicts = [{"event": "train_step", **dict(PAYLOAD, step=i)} for i in range(events)]
            for index, stage in enumerate(stages):
                t0 = time.perf_counter()
                for event_dict in dicts:
                    with contextlib.suppress(structlog.DropEvent):
                        stage(None, "info", event_dict)
                per_stage[index].append((time.perf_counter() - t0) / events * 1e6)
        logger.close()
    total = sum(statistics.median(times) for times in per_stage)
    for stage, times in zip(stages, per_stage, strict=True):
        cost = statistics.median(times)
        name = type(stage).__name__
        if name == "WriteLines":
            name += f"({type(stage._render).__name__})"  # type: ignore[attr-defined]  # which renderer
        print(f"    {name:32s} {cost:7.2f} µs  {cost / total:6.1%}")
    print(f"    {'all stages':32s} {total:7.2f} µs  (emit adds the event dict, lock and structlog's call)")


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def goal_memory(report: Report, events: int) -> None:
    print(f"\n[4] resident memory over {events:,} events")
    with tempfile.TemporaryDirectory() as tmp:
        logger = MetricLogger(file=os.devnull, json_file=Path(tmp) / "m.jsonl", hooks=[noop_hook])
        early = 0
        for i in range(events):
            logger.emit("train_step", dict(PAYLOAD, step=i))
            if i == 10_000:
                logger.flush()
                early = rss_bytes()
        logger.flush()
        late = rss_bytes()
        logger.close()
    growth = late - early
    print(f"    RSS after 10,000: {early / 2**20:.1f} MiB; after {events:,}: {late / 2**20:.1f} MiB")
    report.goal(
        f"RSS growth 10k -> {events:,} events", f"{growth / 2**20:.2f} MiB", "<= 1 MiB", growth <= 2**20
    )


def import_seconds(statement: str, rounds: int, env: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, env=env)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def import_ratio(rounds: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """``import structlog`` and ``import speedtronic.profiling``, each less a bare interpreter."""
    bare = import_seconds("pass", rounds, env)
    ours = import_seconds("import speedtronic.profiling", rounds, env) - bare
    theirs = import_seconds("import structlog", rounds, env) - bare
    return theirs, ours


def goal_import(report: Report, rounds: int) -> None:
    print(f"\n[5] import cost in a fresh interpreter (median of {rounds}), minus a bare interpreter")
    heavy = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, speedtronic.profiling; "
            "print(','.join(m for m in ('torch', 'wandb', 'tensorboard') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Like for like: both from compiled bytecode, as an installed package imports. Where
    # PYTHONDONTWRITEBYTECODE is set, an editable checkout has no .pyc and is compiled from source at
    # every start while structlog's .pyc came with its install: that figure is printed, not the goal.
    with tempfile.TemporaryDirectory() as cache:
        compiled = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        compiled["PYTHONPYCACHEPREFIX"] = cache  # the .pyc go here, never into the checkout
        warm = "import structlog, speedtronic.profiling"
        subprocess.run([sys.executable, "-c", warm], check=True, env=compiled)
        theirs, ours = import_ratio(rounds, compiled)
    print(f"    import structlog {theirs * 1e3:.1f} ms; import speedtronic.profiling {ours * 1e3:.1f} ms")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        source_theirs, source_ours = import_ratio(rounds)
        print(
            f"    (PYTHONDONTWRITEBYTECODE set: speedtronic compiled at each start, structlog from its .pyc: "
            f"{source_ours / source_theirs:.2f}x)"
        )
    report.goal("heavy modules imported by speedtronic.profiling", heavy or "none", "none", not heavy)
    report.goal(
        "import speedtronic.profiling / import structlog", f"{ours / theirs:.2f}x", "< 2x", ours < 2 * theirs
    )


REDACT_TEXTS = {
    "ordinary (a traceback line)": 'File "/home/u/train.py", line 12, in main\nValueError: lr=0.1 at step 7 ',
    "URL starts a://b:": "a://b:",
    "URL starts with paths a://b:c/": "a://b:c/",
    "dotted words a.a.": "a.",
    "key=value pw=": "pw=",
    "spaced keys 'api key '": "api key ",
    "URL starts, each with a far @": "a://b:" * 40 + " @",
    "URL starts, one @ at the end": "a://b:",  # the last character becomes an @
}


def goal_redact_text(report: Report, size: int, rounds: int) -> None:
    """``redact_text`` per character on ordinary text and on adversarial text of the same size: the
    worst case within 10x the ordinary one (median of interleaved rounds)."""
    from speedtronic.processors.redact import redact_text

    print(f"\n[6] redact_text, ns per character ({size:,} characters, median of {rounds} rounds)")
    texts = {name: (unit * (size // len(unit) + 1))[:size] for name, unit in REDACT_TEXTS.items()}
    texts["URL starts, one @ at the end"] = texts["URL starts, one @ at the end"][:-1] + "@"
    samples: Samples = {name: [] for name in texts}
    for r in range(rounds):
        for name in rotated(list(texts), r):
            t0 = time.perf_counter()
            redact_text(texts[name])
            samples[name].append((time.perf_counter() - t0) / size * 1e9)
    ordinary = "ordinary (a traceback line)"
    for name, values in samples.items():
        print(f"    {name:34s} {statistics.median(values):8.1f} ns  {ratio(samples, name, ordinary):6.2f}x")
    worst = max(ratio(samples, name, ordinary) for name in samples)
    report.goal(
        "redact_text worst case / ordinary text, per character", f"{worst:.1f}x", "<= 10x", worst <= 10
    )


def machine() -> str:
    """The machine, its load and the date, printed with the figures."""
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    versions = f"structlog {structlog.__version__}, orjson {orjson.__version__}"
    return (
        f"{os.cpu_count()} x {platform.machine()} cores, load average {load}; "
        f"Python {platform.python_version()}, {versions}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and events")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument(
        "--only",
        action="append",
        choices=["1", "2b", "2c", "threads", "3", "memory", "import", "redact"],
        help="run only these sections (repeatable): to compare two checkouts, run each in turn",
    )
    args = parser.parse_args()
    events, rounds = (2_000, 5) if args.quick else (10_000, 15)
    print(machine())
    report = Report()
    sections: dict[str, Callable[[], None]] = {
        "1": lambda: goal_full_and_skip(report, events, rounds),
        "2b": lambda: goal_payload_size(report, events, rounds),
        "2c": lambda: goal_wide_records(report, events, rounds),
        "threads": lambda: goal_threads(report, events, rounds),
        "3": lambda: stage_costs(events),
        "memory": lambda: goal_memory(report, 100_000 if args.quick else 1_000_000),
        "import": lambda: goal_import(report, 5 if args.quick else 11),
        "redact": lambda: goal_redact_text(report, 120_000 if args.quick else 600_000, rounds),
    }
    for name, run in sections.items():
        if args.only is None or name in args.only:
            run()
    return report.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
