"""The hook protocol, CallbackList and the on_event adapter."""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any

import pytest

from speedtronic.hooks import CallbackList, HookList, TrainingHook, as_callback, on_event
from speedtronic.processors import DispatchHooks


class Pickled:
    """A hook that pickles, though its ``on_event`` (what ``targets`` holds) doesn't."""

    on_event = staticmethod(lambda event, payload: None)


class Journal:
    def __init__(self, name: str, out: list[str]) -> None:
        self.name, self.out = name, out

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.out.append(f"{self.name} {event}")

    def close(self) -> None:
        self.out.append(f"{self.name} close")


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
    """``targets`` is what the logger calls per event: it must follow every change to the list."""

    @staticmethod
    def called(hooks: Any) -> list[str]:
        out: list[str] = []
        for hook, target in hooks.targets:
            hook.out = out
            target("e", {})
        return out

    def test_targets_follow_every_list_method(self) -> None:
        a, b, c = Journal("a", []), Journal("b", []), Journal("c", [])
        hooks = HookList([a])
        hooks.append(b)
        assert self.called(hooks) == ["a e", "b e"]
        hooks.insert(0, c)
        assert self.called(hooks) == ["c e", "a e", "b e"]
        hooks.reverse()
        assert self.called(hooks) == ["b e", "a e", "c e"]
        hooks.sort(key=lambda hook: hook.name)
        assert self.called(hooks) == ["a e", "b e", "c e"]
        hooks.remove(b)
        assert self.called(hooks) == ["a e", "c e"]
        assert hooks.pop() is c
        assert self.called(hooks) == ["a e"]
        hooks += [b]
        hooks.extend([c])
        assert self.called(hooks) == ["a e", "b e", "c e"]
        del hooks[1]
        assert self.called(hooks) == ["a e", "c e"]
        hooks[0] = b
        hooks[1:] = [a]
        assert self.called(hooks) == ["b e", "a e"]
        hooks *= 2
        assert self.called(hooks) == ["b e", "a e", "b e", "a e"]
        hooks.clear()
        assert hooks.targets == ()

    def test_targets_pair_each_hook_with_what_calling_it_means(self) -> None:
        journal = Journal("a", [])

        def function(event: str, payload: dict[str, Any]) -> None: ...

        assert HookList([journal, function]).targets == ((journal, journal.on_event), (function, function))

    def test_a_refused_hook_leaves_targets_as_they_were(self) -> None:
        hooks = HookList([Journal("a", [])])
        before = hooks.targets
        with pytest.raises(TypeError):
            hooks.append(42)
        with pytest.raises(TypeError):
            hooks[0:1] = [42]
        assert hooks.targets == before

    def test_two_threads_changing_it_at_once_leave_targets_right(self) -> None:
        """Thread A appends while thread B removes: targets end as the list does (no lost update)."""
        reading, removed = threading.Event(), threading.Event()

        class Slow:
            """Pauses thread A while targets are being rebuilt, to make the race happen every time."""

            armed = False

            @property
            def on_event(self) -> Any:
                if self.armed and threading.current_thread().name == "A":
                    reading.set()
                    removed.wait(0.5)  # with the lock, B can't remove meanwhile: this times out
                return lambda event, payload: None

        x, y, z = Slow(), Journal("y", []), Journal("z", [])
        hooks = HookList([x, y])
        x.armed = True
        a = threading.Thread(target=hooks.append, args=(z,), name="A")
        b = threading.Thread(target=lambda: (reading.wait(5), hooks.remove(x), removed.set()), name="B")
        a.start()
        b.start()
        a.join()
        b.join()
        assert list(hooks) == [y, z]
        assert [hook for hook, _ in hooks.targets] == [y, z]

    def test_a_failed_sort_leaves_targets_as_the_list(self) -> None:
        hooks = HookList([Journal("b", []), Journal("a", []), Journal("c", [])])
        with pytest.raises(TypeError):
            hooks.sort(key=lambda hook: 0 if hook.name == "c" else hook.name)  # "a" < 0 fails part-way
        assert [hook for hook, _ in hooks.targets] == list(hooks)

    def test_copies_and_pickles_rebuild_targets(self) -> None:
        """A copy or an unpickled list resolves its own targets (the resolved callables aren't kept)."""
        empty = copy.copy(HookList())
        assert empty.targets == ()
        hooks = HookList([Pickled()])
        for twin in (copy.copy(hooks), copy.deepcopy(hooks), pickle.loads(pickle.dumps(hooks))):
            ((hook, target),) = twin.targets
            assert hook is twin[0]
            assert target == twin[0].on_event

    def test_dispatch_over_a_plain_list_sees_later_changes(self) -> None:
        """A plain list, not a HookList, is resolved per event: a hook appended later is called."""
        out: list[str] = []
        hooks: list[Any] = [Journal("a", out)]
        dispatch = DispatchHooks(hooks, final=False)
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
            CallbackList().append("not a hook")

    def test_each_callback_gets_its_own_payload(self) -> None:
        seen: list[dict[str, Any]] = []
        callbacks = CallbackList([lambda e, p: p.clear(), lambda e, p: seen.append(p)])
        callbacks.on_event("e", {"a": 1})
        assert seen == [{"a": 1}]


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
