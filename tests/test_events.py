from __future__ import annotations

from typing import Any

import pytest
import structlog
import torch

from speedtronic.errors import EventPayloadError, EventPayloadWarning
from speedtronic.events import PAYLOADS, Event
from speedtronic.processors import ConvertValues, ValidatePayloads
from speedtronic.processors.validate import payload_problems

CATALOG = [
    "train_start",
    "train_step",
    "checkpoint",
    "train_end",
    "compile",
    "outer_step",
    "delta_upload_queued",
    "delta_uploaded",
    "delta_upload_skipped",
    "delta_upload_failed",
    "delta_upload_stale",
    "shape_profile",
    "shape_warning",
    "ooo_backprop",
    "checkpoint_skipped",
    "eval",
    "hyperparams",
    "system",
    "alert",
]


def train_step(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "step": 3,
        "loss": 1.5,
        "lr": 1e-3,
        "samples_per_s": 10.0,
        "tokens_per_s": 160.0,
        "samples": 24,
        "tokens": 384,
        "microbatches": 1,
    }
    payload.update(changes)
    return {key: value for key, value in payload.items() if value is not ...}


class TestEvent:
    def test_names_every_event_of_the_catalog(self) -> None:
        """Event has exactly the catalog's events, in the documented order."""
        assert [event.value for event in Event] == CATALOG

    def test_members_are_their_names(self) -> None:
        """A member equals, prints and formats as its name, so emit(Event.X) logs "x"."""
        assert Event.TRAIN_STEP == "train_step"
        assert str(Event.TRAIN_STEP) == "train_step"
        assert f"{Event.SHAPE_WARNING}" == "shape_warning"
        assert {"train_step": 1}[Event.TRAIN_STEP] == 1

    def test_every_event_has_a_payload_type(self) -> None:
        """PAYLOADS maps each event to a TypedDict with at least one required key."""
        assert set(PAYLOADS) == set(Event)
        for payload_type in PAYLOADS.values():
            assert payload_type.__required_keys__  # type: ignore[attr-defined]


class TestPayloadProblems:
    def test_a_complete_payload_has_none(self) -> None:
        """A payload with every required key of the right type passes, extra keys included."""
        assert payload_problems("train_step", train_step(elapsed_s=0.1, grad_norm=0.5)) == []

    def test_names_each_missing_required_key(self) -> None:
        """Every missing required key is reported by name."""
        problems = payload_problems("train_step", train_step(loss=..., microbatches=...))
        assert problems == ["missing required key 'loss'", "missing required key 'microbatches'"]

    def test_names_a_value_of_the_wrong_type(self) -> None:
        """A value of the wrong type is reported with the key, the expected type and the value."""
        assert payload_problems("checkpoint", {"step": "10", "path": "x.pt"}) == [
            "step: expected int, got str '10'"
        ]

    def test_a_bool_is_not_a_count(self) -> None:
        """True is an int to Python but not a step number."""
        assert payload_problems("train_step", train_step(step=True)) == ["step: expected int, got bool True"]

    def test_a_0d_tensor_is_a_number(self) -> None:
        """A 0-d tensor is accepted where the catalog says Real; a 1-d one is not."""
        assert payload_problems("train_step", train_step(loss=torch.tensor(1.5))) == []
        (problem,) = payload_problems("train_step", train_step(loss=torch.ones(2)))
        assert problem.startswith("loss: expected float or a 0-d tensor, got Tensor")

    def test_optional_values_are_checked_when_present(self) -> None:
        """An optional key is not required, but its value is still type-checked."""
        warning = {"field": "fc.in_features", "value": 100, "alignment": 8}
        assert payload_problems("shape_warning", warning) == []
        assert payload_problems(
            "shape_warning", {"field": "f", "value": 100, "alignment": 8, "suggested": "104"}
        ) == ["suggested: expected int, got str '104'"]

    def test_none_and_lists_where_the_catalog_allows_them(self) -> None:
        """final_loss may be None; stages must be a list of strings."""
        end = {"step": 5, "steps_run": 0, "duration_s": 0.1, "final_loss": None}
        assert payload_problems("train_end", end) == []
        assert payload_problems("ooo_backprop", {"enabled": True, "stages": ["a", 2]}) == [
            "stages: expected list[str], got list ['a', 2]"
        ]

    def test_events_outside_the_catalog_are_not_checked(self) -> None:
        """A user's own event passes whatever it carries."""
        assert payload_problems("my_event", {"anything": object()}) == []


class TestValidatePayloads:
    def test_warns_by_default(self) -> None:
        """A bad payload warns EventPayloadWarning naming the event and the problem; the event passes."""
        event_dict = {"event": "checkpoint", "step": 1}
        with pytest.warns(EventPayloadWarning, match=r"checkpoint payload .* missing required key 'path'"):
            assert ValidatePayloads()(None, "info", dict(event_dict)) == event_dict

    def test_strict_raises(self) -> None:
        """strict=True raises EventPayloadError instead."""
        with pytest.raises(EventPayloadError, match="missing required key 'path'"):
            ValidatePayloads(strict=True).check("checkpoint", {"step": 1})

    def test_is_a_processor_in_any_structlog_chain(self) -> None:
        """Before ConvertValues it sees tensors, after it numbers; both validate."""
        captured = structlog.testing.LogCapture()
        log = structlog.wrap_logger(
            None,
            processors=[
                ValidatePayloads(strict=True),
                ConvertValues(),
                ValidatePayloads(strict=True),
                captured,
            ],
        )
        log.info("train_step", **train_step(loss=torch.tensor(0.25)))
        assert captured.entries[0]["loss"] == 0.25
