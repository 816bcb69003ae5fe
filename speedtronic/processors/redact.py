"""``Redact``: the stage that hides secrets from every sink and hook, by the rules of
``speedtronic.record.secrets``."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import functools
import operator
import pathlib
import re
import sys
import types
from collections import UserList, deque
from collections.abc import Callable, Iterable, Mapping, MappingView
from typing import Any

from structlog.typing import EventDict, WrappedLogger

from speedtronic.record.contract import free_name
from speedtronic.record.safe_text import safe_repr, safe_str
from speedtronic.record.secrets import (
    MAX_REDACTED_CHARS,
    REDACTED,
    ExceptionText,
    is_path_key,
    is_secret_key,
    redact_exception,
    redact_path,
    redact_text,
)
from speedtronic.record.values import MAX_DEPTH, PLAIN_NUMBERS, Converted, Seen, Truncated, to_python

__all__ = [
    "MAX_REDACTED_CHARS",
    "REDACTED",
    "ExceptionText",
    "Redact",
    "is_secret_key",
    "redact_exception",
    "redact_path",
    "redact_text",
]


_DEFAULT_STR: Any = object.__str__  # a class with it prints its repr()
_NUMBERS = (int, float, type(None))  # bool is an int
_CONTAINERS = (Mapping, list, tuple, set, frozenset, deque, UserList, MappingView)


class Redact:
    """Replaces secrets with ``replacement`` in the event dict, at any depth, for every later stage.

    A value is hidden when its key is secret (``is_secret_key``, or one of ``patterns``, ``fnmatch``
    style, case-insensitive; the key's ``str()`` is judged too, so ``("api_key",)`` or a ``str`` enum
    keyed ``pw`` is caught), and credential-looking text is replaced inside any string
    (``redact_text``; ``values=False`` turns this off, ``words=False`` leaves only ``patterns`` for
    keys). The top-level ``"event"`` is left as it is.

    What it opens: mappings; lists, tuples (a named tuple's field names are keys; a pair such as
    ``("Authorization", "Bearer ...")``, tuple or two-item list, whose first item is a secret key hides
    its second: ``to_python`` makes header tuples lists; in an argument list the item after a secret
    ``-`` option, ``["--password", X]``, is hidden), sets,
    ``deque``, ``UserList`` and dict views; config objects with a generated ``repr`` (dataclasses,
    pydantic 2 models, attrs classes: attrs 25.4 or later tells a generated ``repr`` apart) and
    namespaces (an ``args`` object); numpy arrays of objects or text (converted with ``to_python``).
    Anything else is judged by its text (``str()`` and ``repr()``): if that holds a credential, the
    object is replaced by its redacted text. A value that can't be looked at (an attribute lookup
    raises: a ``LocalProxy`` outside its context, a lazy object failing to load) is replaced by its
    text, redacted (``"<unprintable ...>"`` when even that fails), so the record is still written.

    The caller's objects are never changed and never revealed more than the unredacted output would:
    a container holding a secret is copied as a plain ``dict``, ``list`` or ``tuple`` (a named tuple
    keeps its type), a config object as a ``dict`` of the fields its ``repr`` shows (``repr=False``
    fields are left out, an attrs field's ``repr=`` function is applied); one holding none is passed
    on as the same object. Each container is walked
    once per event: a shared one is redacted once, one that contains itself becomes ``"<cycle>"``, and
    nesting deeper than ``MAX_DEPTH`` is cut, so a secret can't hide below what this looks at.

    It works in either place around ``ConvertValues``; after it, it sees exactly the values every
    sink and hook gets.
    """

    __slots__ = ("_judge", "_last", "_path", "_plans", "_replacement", "_text")

    def __init__(
        self,
        patterns: Iterable[str] = (),
        replacement: str = REDACTED,
        *,
        words: bool = True,
        values: bool = True,
    ) -> None:
        if isinstance(patterns, str):
            raise TypeError(
                f"Redact(patterns=...) takes a list of patterns, not one string: use [{patterns!r}]"
            )
        patterns = list(patterns)
        if not all(isinstance(p, str) for p in patterns):
            raise TypeError(f"Redact(patterns=...) takes strings, got {patterns!r}")
        regex = "|".join(fnmatch.translate(p) for p in patterns) or "(?!)"
        glob = re.compile(regex, re.IGNORECASE | re.DOTALL)
        by_words = is_secret_key if words else _never

        text: Callable[[str], str] = (
            functools.partial(redact_text, replacement=replacement) if values else _unchanged_text
        )

        @functools.lru_cache(maxsize=4096)  # keys repeat from event to event: each is judged once
        def judge(key: str) -> tuple[bool, str]:
            """Whether ``key`` is secret, and the key as written (itself unless it is a credential)."""
            return by_words(key) or glob.match(key) is not None, text(key)

        self._judge = judge
        self._text = text
        self._path: Callable[[str], str] = (
            functools.partial(redact_path, replacement=replacement) if values else _unchanged_text
        )
        self._replacement = replacement
        self._plans: dict[tuple[str, ...], _Plan] = {}
        self._last = _NO_PLAN

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        """Each key *set* is judged once (``_Plan``): a train_step's keys come back every step, and
        judging them again, key by key, is most of what this stage would cost."""
        keys = tuple(event_dict)
        plan = self._last  # the same key set as the last event's, mostly: compared, not hashed
        if plan.keys != keys:
            plan = self._plans.get(keys) or _NO_PLAN
        if plan is _NO_PLAN or not _STR_ONLY.issuperset(map(type, keys)):  # a str-like key: judged each time
            judged = self._plan(keys)
            if judged is None:
                return self._redact(event_dict)
            plan = judged
        self._last = plan
        for key in plan.secret:
            event_dict[key] = self._replacement
        kinds = tuple(map(type, event_dict.values()))
        if kinds == plan.plain_kinds:  # the same value types as an event whose others were numbers
            return event_dict
        others = plan.others
        if not others or PLAIN_NUMBERS.issuperset(map(type, plan.values(event_dict))):
            plan.plain_kinds = kinds
            return event_dict
        seen: Seen | None = None
        for key in others:
            value = event_dict[key]
            if type(value) is str:
                event_dict[key] = self._path(value) if is_path_key(key) else self._text(value)
            elif type(value) not in PLAIN_NUMBERS:
                seen = seen or Seen()
                event_dict[key] = self._scrub(value, 1, seen)
        return event_dict

    def _plan(self, keys: tuple[Any, ...]) -> _Plan | None:
        """The judgement of these keys, remembered; ``None`` when a key is no plain ``str`` or is
        renamed (a key that is itself a credential): those are judged event by event."""
        if not _STR_ONLY.issuperset(map(type, keys)):
            return None
        secret: list[str] = []
        others: list[str] = []
        for key in keys:
            if key == "event":
                continue
            is_secret, name = self._judge(key)
            if name != key:
                return None
            (secret if is_secret else others).append(key)
        if len(self._plans) >= _MAX_PLANS:  # bounded: key sets that never come back don't pile up
            self._plans.clear()
        plan = self._plans[keys] = _Plan(keys, tuple(secret), tuple(others))
        return plan

    def _redact(self, event_dict: EventDict) -> EventDict:
        """Every key judged in turn: for key sets with a non-``str`` key or a key to rename."""
        seen: Seen | None = None
        renamed = False
        for key, value in event_dict.items():
            if key == "event":
                continue
            secret, name = self._judge(key) if type(key) is str else (self._is_secret(key), key)
            if secret:
                event_dict[key] = self._replacement
            elif type(value) is str:
                event_dict[key] = (
                    self._path(value) if type(key) is str and is_path_key(key) else self._text(value)
                )
            elif type(value) not in PLAIN_NUMBERS:
                seen = seen or Seen()
                event_dict[key] = self._scrub(value, 1, seen)
            renamed = renamed or (name is not key and name != key)  # equal text: an equal key, not renamed
        if renamed:  # a key that is itself a credential: rebuilt in place, in order
            items = list(event_dict.items())
            event_dict.clear()
            counters: dict[str, int] = {}
            for key, value in items:
                event_dict[_free_key(event_dict, self._name(key), counters)] = value
        return event_dict

    def _is_secret(self, key: object) -> bool:
        if type(key) is str:
            return self._judge(key)[0]
        if isinstance(key, str) and self._judge(str.__str__(key))[0]:
            return True
        return self._judge(safe_str(key))[0]

    def _name(self, key: Any) -> Any:
        """A ``str`` key as it is written: a key that is itself a credential is redacted text."""
        return self._judge(key)[1] if type(key) is str else key

    def _scrub(self, value: Any, depth: int, seen: Seen) -> Any:
        """``value`` with its secrets replaced: the same object when it holds none.

        A value that can't be looked at (an attribute lookup raises: a ``LocalProxy`` outside its
        context, a lazy object that fails to load) becomes its text, redacted, so the record is kept.
        """
        try:
            return self._scrub_value(value, depth, seen)
        except Exception:
            return Converted(self._text(safe_str(value)))

    def _scrub_value(self, value: Any, depth: int, seen: Seen) -> Any:
        if isinstance(value, _NUMBERS):
            return value
        if isinstance(value, str):
            return self._scrub_text(value)
        fields = _shown_fields(value)
        if fields is None and not isinstance(value, _CONTAINERS):
            return self._scrub_leaf(value, depth, seen)
        if depth > MAX_DEPTH:
            return Truncated(f"<truncated: nested deeper than {MAX_DEPTH} levels>")
        again = seen.again(value)
        if again is not None:
            return again
        opened = seen.open(value)
        try:
            result = self._scrub_container(value, fields, depth, seen)
        except Exception:  # a container that can't be read is not passed on unread
            result = Converted(f"<unreadable {type(value).__qualname__}>")
        seen.close(value, result, opened)
        return result

    def _scrub_container(self, value: Any, fields: dict[str, Any] | None, depth: int, seen: Seen) -> Any:
        if fields is not None:
            scrubbed = self._scrub_mapping(fields, depth, seen)
            return value if scrubbed is fields else scrubbed
        if isinstance(value, Mapping):
            return self._scrub_mapping(value, depth, seen)
        items = list(value)
        names = getattr(value, "_fields", None) if isinstance(value, tuple) else None
        pair = len(items) == 2 and isinstance(items[0], str) and isinstance(value, tuple | list)
        if names is None and pair:
            names = (None, items[0])  # a pair ("Authorization", "Bearer ..."), a list after to_python
        if names is None or len(names) != len(items):
            names = _flag_names(items)
        new = [
            self._replacement
            if name is not None and self._is_secret(name)
            else self._scrub(item, depth + 1, seen)
            for name, item in zip(names, items, strict=True)
        ]
        if all(a is b for a, b in zip(new, items, strict=True)):
            return value
        if not isinstance(value, tuple):
            return new
        if hasattr(value, "_make"):
            try:
                return value._make(new)
            except Exception:
                pass
        return tuple(new)

    def _scrub_mapping(self, value: Mapping[Any, Any], depth: int, seen: Seen) -> Any:
        changed = False
        out: dict[Any, Any] = {}
        counters: dict[str, int] = {}
        for key, item in list(value.items()):
            secret, name = self._judge(key) if type(key) is str else (self._is_secret(key), key)
            if secret:
                new = self._replacement
            elif type(item) is str and type(key) is str and is_path_key(key):
                new = self._path(item)
            else:
                new = self._scrub(item, depth + 1, seen)
            changed = changed or new is not item
            if name is not key and name != key:  # a key that is itself a credential
                key = _free_key(out, name, counters)
                changed = True
            out[key] = new
        return out if changed else value

    def _scrub_text(self, text: str) -> str:
        new = self._text(text)
        if new is text:
            return text
        return Truncated(new) if isinstance(text, Truncated) else new

    def _scrub_leaf(self, value: Any, depth: int, seen: Seen) -> Any:
        """A value not opened: a numpy array of objects or text is converted and scrubbed; an
        exception holding a secret anywhere in its whole (``redact_exception``: its message, its
        ``args``, ``("password", "hunter2")``, its notes, causes and contexts, its printed stack)
        becomes its message redacted when that held one, else its line, ``"ValueError: ..."``,
        redacted (the pair's hidden); anything else whose text (``str()``, or
        ``repr()`` as containers show it) holds a credential becomes that text, redacted."""
        if _is_text_array(value):
            converted = to_python(value)
            scrubbed = self._scrub(converted, depth, seen)
            return value if scrubbed is converted and isinstance(converted, list) else scrubbed
        if self._text is _unchanged_text or _is_numeric(value):
            return value
        if isinstance(value, pathlib.PurePath):  # a path is data: kept, but for a query string
            text = safe_str(value)
            return value if self._path(text) is text else Converted(self._path(text))
        if isinstance(value, BaseException):  # judged whole: its notes, causes, contexts and stack too
            shown = redact_exception(
                value, self._replacement, text=self._text, args=lambda args: self._scrub(args, depth, seen)
            )
            if not shown.hidden:
                return value
            own = safe_str(value)  # a secret in its own text: that text, redacted, as before
            return Converted(shown.message if self._text(own) != own else shown.line)
        text = safe_str(value)
        new = self._text(text)
        if new is text and type(value).__str__ is not _DEFAULT_STR:
            text = safe_repr(value)
            new = self._text(text)
        return value if new is text else Converted(new)


_STR_ONLY = frozenset({str})
_MAX_PLANS = 256  # key sets a Redact remembers


class _Plan:
    """What ``Redact`` decided about one key set (``keys``): the keys whose values are hidden, and the others
    (``"event"`` aside), whose values are looked at each event; ``values`` reads the others' values
    at C speed. ``plain_kinds``: the type of each value (in the key set's order, secrets hidden) of
    the last event whose others were all numbers: an event of the same types has nothing to look at,
    which one C-level tuple comparison tells."""

    __slots__ = ("keys", "others", "plain_kinds", "secret", "values")

    def __init__(self, keys: tuple[str, ...], secret: tuple[str, ...], others: tuple[str, ...]) -> None:
        self.keys = keys
        self.secret = secret
        self.others = others
        self.plain_kinds: tuple[type, ...] = ()
        self.values: Callable[[EventDict], Any] = (
            operator.itemgetter(*others)
            if len(others) > 1
            else lambda event_dict: [event_dict[key] for key in others]  # itemgetter of one: no tuple
        )


_NO_PLAN = _Plan((), (), ())  # no plan yet: compared with an event's keys first, then looked up


def _flag_names(items: list[Any]) -> list[Any]:
    """Each item's name in a command line (``["--password", "X"]``): the option just before it
    (``--password``), when that is a ``-`` flag without a ``=``; else ``None``."""
    names: list[Any] = [None] * len(items)
    for i in range(1, len(items)):
        flag = items[i - 1]
        if type(flag) is str and flag[:1] == "-" and "=" not in flag:
            names[i] = flag
    return names


def _never(key: str) -> bool:
    return False


def _unchanged_text(text: str) -> str:
    return text


def _free_key(taken: Mapping[Any, Any], key: Any, counters: dict[str, int]) -> Any:
    return free_name(taken, key, counters) if key in taken else key


def _shown_fields(value: Any) -> dict[str, Any] | None:
    """The fields the generated ``repr`` of a dataclass, a pydantic model or an attrs instance shows,
    or a namespace's attributes; else ``None``. A class with a text of its own is not opened: it is
    judged by that text, like any other object."""
    if isinstance(value, types.SimpleNamespace | argparse.Namespace):
        return dict(vars(value))
    if isinstance(value, type):
        return None
    if dataclasses.is_dataclass(value):
        params = getattr(value, "__dataclass_params__", None)
        if params is None or not params.repr or type(value).__str__ is not _DEFAULT_STR:
            return None
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value) if f.repr}
    shown = _pydantic_fields(value)
    return shown if shown is not None else _attrs_fields(value)


def _pydantic_fields(value: Any) -> dict[str, Any] | None:
    """A pydantic 2 model's fields as its ``repr`` shows them: declared fields without ``repr=False``,
    extra fields, computed fields with ``repr=True``."""
    base = getattr(sys.modules.get("pydantic.main"), "BaseModel", None)
    if base is None or not isinstance(value, base):
        return None
    kind = type(value)
    declared = getattr(kind, "model_fields", None)  # pydantic 1 has none: judged by its text
    if declared is None or kind.__repr__ is not base.__repr__ or kind.__str__ is not base.__str__:
        return None
    shown = {name: getattr(value, name) for name, field in declared.items() if field.repr}
    shown.update(value.model_extra or {})
    computed = kind.model_computed_fields
    shown.update({name: getattr(value, name) for name, field in computed.items() if field.repr})
    return shown


def _attrs_fields(value: Any) -> dict[str, Any] | None:
    """An attrs instance's fields as its generated ``repr`` shows them: without ``repr=False``, and
    through a field's own ``repr=`` function. Needs attrs 25.4 (``attrs.inspect``) to tell a generated
    ``repr`` from a hand-written one; with an older attrs the instance is judged by its text."""
    attr = sys.modules.get("attr")
    if attr is None or not attr.has(type(value)):
        return None
    import attrs  # installed with attr; the namespace holding ``inspect`` (``@attr.s`` code needn't load it)

    inspect = getattr(attrs, "inspect", None)
    if inspect is None:
        return None
    props = inspect(type(value))
    if not props.added_repr or not (props.added_str or type(value).__str__ is _DEFAULT_STR):
        return None
    shown: dict[str, Any] = {}
    for field in attr.fields(type(value)):
        if field.repr is True:
            shown[field.name] = getattr(value, field.name)
        elif field.repr:  # a function giving the field's text
            shown[field.name] = Converted(str(field.repr(getattr(value, field.name))))
    return shown


def _is_text_array(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray) and value.dtype.kind in "OUSV"


def _is_numeric(value: Any) -> bool:
    """Tensors, numeric arrays and numpy numbers: their text holds no credential."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return True
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return isinstance(kind, str) and kind in "biufcmM"
