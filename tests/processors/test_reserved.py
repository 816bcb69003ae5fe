"""``RenameReserved``: a payload can't set the record's own keys, directly, in a stock chain and in the
logger's chain."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import structlog

from speedtronic.processors import JSONLRenderer, RenameReserved
from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl


class TestRenameReserved:
    def test_reserved_keys_are_kept_under_payload_names(self) -> None:
        """Called directly, it keeps ``event`` first and renames the record's own keys."""
        renamed = RenameReserved()(None, "info", {"timestamp": "t", "event": "x", "rank": 3, "loss": 1.0})
        assert list(renamed) == ["event", "payload_timestamp", "payload_rank", "loss"]
        assert renamed == {"event": "x", "payload_timestamp": "t", "payload_rank": 3, "loss": 1.0}

    def test_a_payload_name_already_taken_gets_a_counter(self) -> None:
        """A payload holding both ``rank`` and ``payload_rank`` keeps both, the renamed one as ``#2``."""
        renamed = RenameReserved()(None, "info", {"event": "x", "payload_rank": 1, "rank": 2})
        assert renamed == {"event": "x", "payload_rank": 1, "payload_rank#2": 2}

    def test_event_dict_makes_the_loggers_event_dict(self) -> None:
        """``event_dict`` makes an event's dict from its payload: a payload ``event`` can't replace it,
        and a key that is not a string is written as the JSONL writer writes it."""
        fields = RenameReserved.event_dict("train_step", {"event": "fake", 1: "one", "1": "str"})
        assert fields == {"payload_event": "fake", "1#2": "one", "1": "str", "event": "train_step",
                          "_speedtronic": {"converted": ["1#2"]}}  # fmt: skip

    def test_in_a_stock_structlog_chain(self) -> None:
        """In a stock chain a payload's ``_speedtronic`` can't pass for the logger's own record."""
        log = structlog.wrap_logger(
            structlog.ReturnLogger(), processors=[RenameReserved(), JSONLRenderer(lambda: 0.0)]
        )
        record = orjson.loads(log.info("x", _speedtronic={"origin": "speedtronic"}, timestamp="t"))
        assert record["payload__speedtronic"] == {"origin": "speedtronic"}
        assert record["payload_timestamp"] == "t"
        assert record["_speedtronic"]["origin"] == "user"

    def test_in_the_loggers_chain(self, tmp_path: Path) -> None:
        """MetricLogger's chain runs it: the record keeps the payload's reserved keys renamed."""
        path = tmp_path / "m.jsonl"
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            assert logger.chain.processors[1] is logger.chain.reserved
            logger.emit("eval", {"world_size": 8, "loss": 0.5})
        (record,) = read_jsonl(path)
        assert (record["event"], record["payload_world_size"], record["loss"]) == ("eval", 8, 0.5)
