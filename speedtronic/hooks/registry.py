"""Hook types by name: the ``speedtronic.hooks`` entry-point group, read in one place, and
``build_hook``, the one way a hook is made from configuration."""

from __future__ import annotations

import collections.abc
import importlib
import inspect
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from speedtronic.hooks.background import background
from speedtronic.hooks.dispatch import as_callback, close_hook
from speedtronic.record.secrets import redact_exception

__all__ = [
    "ENTRY_POINT_GROUP",
    "HookConfigError",
    "build_hook",
    "hook_argument_problem",
    "hook_type",
    "hook_types",
]

ENTRY_POINT_GROUP = "speedtronic.hooks"
"""The entry-point group hook types are registered in: ``name = "package.module:factory"``."""

_OWN_DISTRIBUTION = "speedtronic"


def hook_types() -> dict[str, str]:
    """Every registered hook type, as ``{name: "package.module:factory"}``, sorted by name.

    Read from the installed distributions' entry points at each call (nothing is imported). A name
    speedtronic's own distribution registers wins over another package's; between other packages, the
    first distribution found on ``sys.path`` wins.
    """
    import importlib.metadata  # here, not at import: it costs more than the rest of speedtronic.hooks

    own: dict[str, str] = {}
    others: dict[str, str] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry_point, "dist", None)
        is_own = dist is not None and _normalized(dist.name) == _OWN_DISTRIBUTION
        (own if is_own else others).setdefault(entry_point.name, entry_point.value)
    return dict(sorted({**others, **own}.items()))


def hook_type(name: str) -> Callable[..., Any]:
    """The factory (usually a class) of the hook type ``name``, imported now.

    ``name`` is a registered name (``hook_types()``) or, for a factory nobody registered,
    ``"package.module:factory"``. Raises ``LookupError`` for an unknown name, with the known ones
    listed, and for a factory that can't be imported or isn't callable. A factory's own optional
    dependency (an SDK) is imported when the hook is constructed, not here.
    """
    known = hook_types()
    target = known.get(name)
    if target is None and ":" not in name:
        listed = ", ".join(known) or "none (speedtronic's package metadata is missing: pip install -e .)"
        raise LookupError(f"unknown hook type {name!r}; known types: {listed}, or 'package.module:factory'")
    target = target or name
    module_name, _, attribute = target.partition(":")
    attribute = attribute.split("[", 1)[0].strip()  # an entry point's "[extra]" marker is not a name
    try:
        found: Any = importlib.import_module(module_name.strip())
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as error:
        raise LookupError(f"hook type {name!r} ({target}) can't be imported: {error}") from None
    except Exception as error:  # the module's own failure (a SyntaxError, a NameError): its type says how
        raise LookupError(
            f"hook type {name!r} ({target}) can't be imported: {type(error).__name__}: {error}"
        ) from None
    if not callable(found):
        raise LookupError(f"hook type {name!r} ({target}) is not callable")
    return found  # type: ignore[no-any-return]  # checked callable just above


class HookConfigError(ValueError):
    """A hook entry that can't be built: its options don't fit the type, its factory failed, or what
    it made is no hook. The message says which, naming the type."""


def build_hook(type_name: str, options: Mapping[str, Any] | None = None) -> Any:
    """A hook of the registered type ``type_name`` made with ``options`` as keyword arguments.

    The option ``background`` is the entry's, not the factory's: ``background=True`` returns the hook
    wrapped in ``speedtronic.hooks.background(hook)``, called on a worker thread of its own, so a
    tracker's network calls stay off the training thread.

    Raises ``LookupError`` for an unknown type (``hook_type``), ``ModuleNotFoundError`` naming the
    extra for a type whose SDK is missing, and ``HookConfigError`` for options the factory doesn't
    take (checked before anything is created), a factory that fails, or a result that can't be called
    as ``(event, payload)`` (closed again).
    """
    factory = hook_type(type_name)
    options = dict(options or {})
    on_worker = options.pop("background", False)
    if type(on_worker) is not bool:
        raise HookConfigError(f"{type_name} hook: background must be true or false, got {on_worker!r}")
    problem = hook_argument_problem(factory, options)
    if problem is not None:
        raise HookConfigError(f"{type_name} hook: {problem}")
    try:
        hook = factory(**options)
    except ModuleNotFoundError:
        raise
    except Exception as error:
        shown = redact_exception(error)  # an SDK may echo the key it refuses, or chain an error that does
        raise HookConfigError(f"{type_name} hook can't be created: {shown.line}") from (
            None if shown.hidden else error
        )  # a chained error would print the secret again
    try:
        as_callback(hook)
    except TypeError as error:
        close_hook(hook)
        raise HookConfigError(str(error)) from None
    return background(hook) if on_worker else hook


def hook_argument_problem(factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> str | None:
    """What is wrong with calling a hook's ``factory`` with ``kwargs``, in words: an argument it does
    not take, naming those it accepts (``"unknown argument 'bogus'; it accepts log_dir, flush_secs"``),
    or a value not of its parameter's type (``"log_dir: expected text or a path, got a list"``);
    ``None`` when they fit (or the factory has no signature to check)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C factory: its own error says it
        return None
    parameters = signature.parameters.values()
    accepted = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
    unknown = [name for name in kwargs if name not in accepted and not takes_any]
    try:
        signature.bind(**kwargs)
    except TypeError as error:
        problem = str(error)
        if unknown:
            problem = f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
        return f"{problem}; it accepts {', '.join(accepted) or 'no arguments'}"
    return _type_problem(factory, kwargs)


def _type_problem(factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> str | None:
    """The first option whose value is not of its parameter's annotated type, in words
    (``"log_dir: expected text or a path, got a list"``, ``"events[1]: expected text, got 5"``), as far
    as the annotation is one of the plain types a config or ``--hook`` gives (text, numbers, true or
    false, null, paths, lists, mappings): anything else (``Any``, a protocol, a class of the hook's
    own) is the factory's to check."""
    try:
        parameters = inspect.signature(factory, eval_str=True).parameters
    except Exception:  # an annotation that can't be evaluated: nothing to check against
        return None
    for name, value in kwargs.items():
        parameter = parameters.get(name)
        if parameter is None or parameter.kind is parameter.VAR_KEYWORD:
            continue
        if value is None and parameter.default is None:  # the default, given explicitly
            continue
        problem = _misfit(value, parameter.annotation, name)
        if problem is not None:
            return problem
    return None


_LISTS = (
    collections.abc.Collection,
    collections.abc.Iterable,
    collections.abc.Sequence,
    collections.abc.Set,
    list,
    tuple,
    set,
    frozenset,
)
_MAPPINGS = (collections.abc.Mapping, dict)


def _misfit(value: Any, expected: Any, where: str) -> str | None:
    """What makes ``value`` (at ``where``) not of type ``expected``, in words; ``None`` when it is, or
    when ``expected`` is a type this check leaves alone."""
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    kind = origin or expected
    wrong = f"{where}: expected {_described(expected)}, got {_shown(value)}"
    if origin is typing.Union or origin is types.UnionType:
        problems = [_misfit(value, one, where) for one in args]
        if None in problems:
            return None
        others = [one for one in args if one is not type(None)]  # a value that isn't null: what else
        return problems[args.index(others[0])] if value is not None and len(others) == 1 else wrong
    if origin is typing.Literal:
        return None if value in args else wrong
    if expected is type(None) or expected is None:
        return None if value is None else wrong
    if expected in (int, float):  # true/false is no number, an int is a float (PEP 484)
        number = not isinstance(value, bool) and isinstance(value, int if expected is int else int | float)
        return None if number else wrong
    if expected is str and isinstance(value, int | float) and not isinstance(value, bool):
        return f'{wrong}; quote it to give it as text ("{value}")'  # project=2024 reads as a number
    if expected in (str, bool):
        return None if isinstance(value, expected) else wrong
    if kind is os.PathLike:
        return None if isinstance(value, os.PathLike) else wrong
    if kind in _MAPPINGS:
        if not isinstance(value, Mapping):
            return wrong
        item = args[1] if len(args) == 2 else Any  # a key is the factory's (MLflow's tags: str(key))
        return next(
            (p for name, one in value.items() if (p := _misfit(one, item, f"{where}[{name!r}]"))), None
        )
    if kind in _LISTS:
        if isinstance(value, str | bytes) or not isinstance(value, collections.abc.Iterable):
            return wrong  # text is no list of names, even though it iterates
        if not isinstance(value, list | tuple | set | frozenset):
            return None  # an iterator: not consumed here
        item = args[0] if len(args) == 1 else Any
        return next((p for at, one in enumerate(value) if (p := _misfit(one, item, f"{where}[{at}]"))), None)
    return None


_WORDS: dict[Any, str] = {
    str: "text",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
    os.PathLike: "a path",
}


def _described(expected: Any) -> str:
    """``expected`` in a config's words: ``text or null``, ``a list of text``, ``a mapping``."""
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin is typing.Union or origin is types.UnionType:
        words = list(dict.fromkeys(_described(one) for one in args))
        return " or ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} or {words[-1]}"
    if origin is typing.Literal:
        return " or ".join(map(repr, args))
    if (origin or expected) in _MAPPINGS:
        return "a mapping"
    if (origin or expected) in _LISTS:
        return "a list of text" if args[:1] == (str,) else "a list"
    return _WORDS.get(origin or expected, getattr(expected, "__name__", str(expected)))


def _shown(value: Any) -> str:
    """A wrong value as an error line shows it: a number, true/false or null as it is; text, a list
    or a mapping by its kind only (it may hold a token, as a header's value does)."""
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple | set | frozenset):
        return "a list"
    return f"a {type(value).__name__}"


def _normalized(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()
