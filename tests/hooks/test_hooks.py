"""The hook protocol, CallbackList and the on_event adapter."""

from __future__ import annotations

import io
from typing import Any

import pytest

from speedtronic.hooks import CallbackList, DispatchHooks, HookList, TrainingHook, as_callback, on_event
from speedtronic.profiling import MetricLogger
from tests.helpers import Journal


class TestTrainingHook:
    def test_runtime_checkable(self) -> None:
        """An object with on_event is a TrainingHook; a plain function isn't, but is accepted."""
        assert isinstance(Journal("a", []), TrainingHook)
        assert not isinstance(print, TrainingHook)
        assert callable(as_callback(lambda event, payload: None))

    def test_as_callback_prefers_on_event(self) -> None:
        out: list[str] = []
        as_callback(Journal("a", out))("e", {})
        assert out == ["a e"]

    def test_bad_on_event_signature_named(self) -> None:
        """A TrainingHook whose on_event takes the wrong arguments is refused, naming the method."""

        class Wrong:
            def on_event(self, event: str) -> None: ...

        with pytest.raises(TypeError, match=r"Wrong\.on_event' can't be called as \(event, payload\)"):
            as_callback(Wrong())


class TestHookList:
    """Every way of adding a hook checks it, so a bad hook fails where it is registered."""

    @pytest.mark.parametrize(
        "add",
        [
            lambda hooks, hook: hooks.append(hook),
            lambda hooks, hook: hooks.insert(0, hook),
            lambda hooks, hook: hooks.extend([hook]),
            lambda hooks, hook: hooks.__iadd__([hook]),
            lambda hooks, hook: hooks.__setitem__(0, hook),
            lambda hooks, hook: hooks.__setitem__(slice(0, 1), [hook]),
        ],
        ids=["append", "insert", "extend", "iadd", "setitem", "slice"],
    )
    def test_each_way_of_adding_checks_the_hook(self, add: Any) -> None:
        """A refused hook raises TypeError naming it and leaves the list as it was."""
        first = Journal("a", [])
        hooks = HookList([first])
        with pytest.raises(TypeError, match="neither a TrainingHook"):
            add(hooks, 42)
        assert list(hooks) == [first]

    def test_a_list_changed_by_list_methods_is_called_as_it_is(self) -> None:
        """The logger reads the list at each event: reorder, remove, clear all take effect."""
        out: list[str] = []
        a, b, c = Journal("a", out), Journal("b", out), Journal("c", out)
        hooks = HookList([a, b, c])
        dispatch = DispatchHooks(hooks, consume=False)
        hooks.reverse()
        hooks.remove(b)
        dispatch(None, "info", {"event": "one"})
        hooks.clear()
        dispatch(None, "info", {"event": "two"})
        assert out == ["c one", "a one"]

    def test_dispatch_over_a_plain_list_sees_later_changes(self) -> None:
        """A plain list works too: a hook appended later is called from the next event on."""
        out: list[str] = []
        hooks: list[Any] = [Journal("a", out)]
        dispatch = DispatchHooks(hooks, consume=False)
        dispatch(None, "info", {"event": "one"})
        hooks.append(Journal("b", out))
        dispatch(None, "info", {"event": "two"})
        assert out == ["a one", "a two", "b two"]


class TestCallbackList:
    def test_fans_out_in_order_and_closes(self) -> None:
        """on_event reaches each callback in order; close closes each; functions work too."""
        out: list[str] = []
        callbacks = CallbackList([Journal("a", out), lambda e, p: out.append(f"fn {e}")])
        callbacks.append(Journal("b", out))
        assert isinstance(callbacks, TrainingHook)
        callbacks.on_event("train_step", {"step": 1})
        callbacks.close()
        assert out == ["a train_step", "fn train_step", "b train_step", "a close", "b close"]
        assert len(callbacks) == 3

    def test_every_callback_runs_then_first_failure_raises(self) -> None:
        """A failing callback doesn't starve the later ones; the first error is re-raised."""
        out: list[str] = []

        def bad(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("first")

        def worse(event: str, payload: dict[str, Any]) -> None:
            raise KeyError("second")

        callbacks = CallbackList([bad, worse, Journal("c", out)])
        with pytest.raises(ValueError, match="first"):
            callbacks.on_event("e", {})
        assert out == ["c e"]

    def test_validates_on_append(self) -> None:
        with pytest.raises(TypeError, match="neither a TrainingHook"):
            CallbackList().append(42)

    def test_each_callback_gets_its_own_payload(self) -> None:
        seen: list[dict[str, Any]] = []
        callbacks = CallbackList([lambda e, p: p.clear(), lambda e, p: seen.append(p)])
        callbacks.on_event("e", {"a": 1})
        assert seen == [{"a": 1}]


class TestOnEventRegistered:
    """The documented use: on_event wrappers registered as hooks, through the public door."""

    @staticmethod
    def shapes(out: list[Any]) -> list[Any]:
        def payload_only(payload: dict[str, Any]) -> None:
            out.append(("payload_only", payload["step"]))

        def keywords(*, step: int, **rest: Any) -> None:
            out.append(("keywords", step))

        def event_and_keywords(event: str, *, step: int) -> None:
            out.append(("event_and_keywords", event, step))

        def nothing() -> None:
            out.append(("nothing",))

        return [on_event(payload_only), on_event(keywords), on_event(event_and_keywords), on_event(nothing)]

    def test_passed_to_the_logger(self) -> None:
        """MetricLogger(hooks=[on_event(f), ...]) accepts every wrapped shape and calls each."""
        out: list[Any] = []
        with MetricLogger(stream=io.StringIO(), hooks=self.shapes(out)) as logger:
            logger.emit("train_step", {"step": 3, "loss": 0.5})
        assert out == [
            ("payload_only", 3),
            ("keywords", 3),
            ("event_and_keywords", "train_step", 3),
            ("nothing",),
        ]

    def test_appended_to_the_logger(self) -> None:
        """logger.hooks.append(on_event(f)) accepts every wrapped shape."""
        out: list[Any] = []
        with MetricLogger(stream=io.StringIO()) as logger:
            for hook in self.shapes(out):
                logger.hooks.append(hook)
            logger.emit("train_step", {"step": 4})
        assert [entry[0] for entry in out] == ["payload_only", "keywords", "event_and_keywords", "nothing"]

    def test_as_a_decorator(self) -> None:
        """@on_event on a lambda-free function, registered: the README's Hooks example."""
        losses: list[float] = []

        @on_event
        def watch(*, loss: float) -> None:
            losses.append(loss)

        with MetricLogger(stream=io.StringIO(), hooks=[watch]) as logger:
            logger.emit("train_step", {"step": 1, "loss": 2.5})
            logger.emit("checkpoint", {"step": 1, "path": "x"})
        assert losses == [2.5]
        assert watch.__name__ == "watch"


class TestOnEvent:
    def test_two_argument_functions_pass_through(self) -> None:
        out: list[tuple[str, dict[str, Any]]] = []
        on_event(lambda event, payload: out.append((event, payload)))("e", {"a": 1})
        assert out == [("e", {"a": 1})]

    def test_payload_only(self) -> None:
        """f(payload) receives only the payload."""
        out: list[dict[str, Any]] = []

        @on_event
        def record(payload: dict[str, Any]) -> None:
            out.append(payload)

        record("e", {"a": 1})
        assert out == [{"a": 1}]
        assert record.__name__ == "record"

    def test_keyword_style_with_rest(self) -> None:
        """f(event, *, step, loss, **rest): payload keys become keywords."""
        out: list[tuple[str, int, float, dict[str, Any]]] = []

        @on_event
        def record(event: str, *, step: int, loss: float, **rest: Any) -> None:
            out.append((event, step, loss, rest))

        record("train_step", {"step": 2, "loss": 0.5, "lr": 1e-3, 7: "non-str key"})
        assert out == [("train_step", 2, 0.5, {"lr": 1e-3})]

    def test_keyword_style_skips_events_missing_required_keys(self) -> None:
        """An event without a required keyword is not passed to a keyword-style function."""
        out: list[int] = []

        @on_event
        def record(*, step: int, loss: float = 0.0) -> None:
            out.append(step)

        record("checkpoint", {"path": "x"})
        record("train_step", {"step": 3, "other": 1})
        assert out == [3]

    def test_no_arguments(self) -> None:
        out: list[str] = []
        on_event(lambda: out.append("called"))("e", {})
        assert out == ["called"]

    def test_ambiguous_keyword_signature_refused(self) -> None:
        """Two positional parameters plus keywords can't be mapped; the error names the function."""

        def odd(a: Any, b: Any, *, c: Any) -> None: ...

        with pytest.raises(TypeError, match=r"odd.*at most one positional"):
            on_event(odd)

    def test_decision_is_made_once_at_wrap_time(self) -> None:
        """The call style comes from the signature at wrap time, not from each event."""
        calls: list[Any] = []

        def f(payload: dict[str, Any]) -> None:
            calls.append(payload)

        wrapped = on_event(f)
        f.__signature__ = None  # type: ignore[attr-defined]  # changing it later changes nothing
        wrapped("e", {"x": 1})
        assert calls == [{"x": 1}]


def test_on_event_with_an_optional_payload_parameter_gets_both() -> None:
    """f(event, payload=None) has two positional parameters: it is called (event, payload)."""
    out: list[tuple[Any, Any]] = []

    def f(event: str, payload: dict[str, Any] | None = None) -> None:
        out.append((event, payload))

    on_event(f)("train_step", {"step": 1})
    assert out == [("train_step", {"step": 1})]
