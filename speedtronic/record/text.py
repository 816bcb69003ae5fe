"""Text-line formatting: keys and values as ``key=value`` tokens that can never break a line."""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from speedtronic.record.safe_text import int_text, safe_str, value_text
from speedtronic.record.values import PLAIN_NUMBERS

__all__ = [
    "DEFAULT_FLOAT_DIGITS",
    "ValueFormat",
    "format_fields",
    "format_key",
    "format_value",
    "quote",
]

DEFAULT_FLOAT_DIGITS = 4
"""Significant digits of a float in the text line (``lr=0.000975``, ``loss=3.224``), whole digits
never cut (``tokens_per_s=10556.0``); the JSONL record keeps every digit."""

_SAFE = re.compile(r"[A-Za-z0-9_.,:/@%+\-\[\]()<>]+")
_UNSAFE = re.compile('[\\\\"\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]')
_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def quote(text: str) -> str:
    """``text`` bare when safe, else double-quoted with every line-breaking character escaped."""
    if _SAFE.fullmatch(text):
        return text
    return '"' + _UNSAFE.sub(_escape, text) + '"'


class ValueFormat:
    """Formats values as text-line tokens; the float rule is decided here, once.

    A float is rounded to ``digits`` significant digits, but its whole digits are never cut (a float
    at or beyond ``10**digits`` is rounded to a whole number), then written as Python writes floats
    (``repr``): ``0.000975``, ``3.224``, ``1e-07``, ``1.0``, ``10000.0`` (9999.5), ``10556.0``,
    ``1e+20``; ``nan``, ``inf``, ``-inf``; every digit with ``digits=None``. So a float always reads
    as one (a point or an exponent), told from an int. Ints in decimal, ``True``/``None`` as such,
    strings (and anything else, by its ``str()``) bare when safe, else quoted (``quote``).

    ``fields`` writes a whole event's ``key=value`` tokens: per field, one lookup of the key's
    ``" key="`` prefix (each key is quoted once, then remembered) and one of its value's type.
    """

    __slots__ = ("_bulk_digits", "_by_type", "_last", "_plans", "_prefixes", "_spec")

    def __init__(self, digits: int | None = DEFAULT_FLOAT_DIGITS) -> None:
        if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int) or digits < 1):
            raise ValueError(f"float_digits must be an int >= 1 or None, got {digits!r}")
        self._prefixes: dict[str, str] = {}  # " key=" of each str key met (the same come back every event)
        self._plans: dict[tuple[Any, ...], _Plan] = {}  # per key set of a large event (see ``fields``)
        self._last = _NO_PLAN
        self._spec = f".{digits}" if digits is not None else ""  # format()'s text, where it is the rule's
        # Beyond a double's 17 digits format(x, ".18") writes 1e16 as "10000000000000000.0", the
        # rule "1e+16": such a setting takes the plain loop.
        self._bulk_digits = digits is None or digits <= _MAX_BULK_DIGITS
        float_text = _rounding(digits) if digits is not None else _float_repr
        self._by_type: dict[type, Callable[[Any], str]] = {  # the formatter of each plain type
            float: float_text, int: int_text, str: quote, bool: str, type(None): str,
        }  # fmt: skip

    def key(self, key: object) -> str:
        """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``."""
        return self._prefix(key)[1:-1]

    def float(self, value: float) -> str:
        """A float as the text line writes it."""
        return self._by_type[float](float(value))

    def __call__(self, value: Any) -> str:
        plain = self._by_type.get(type(value))
        if plain is not None:
            return plain(value)
        return self._other(value)

    def fields(self, event_dict: Mapping[Any, Any], skip: Container[Any] = ("event",)) -> str:
        """`` key=value`` for every key not in ``skip``, each with a leading space, in order.

        An event of many keys (per-layer metrics) whose values are plain numbers is written in bulk
        (``_Form``): one ``str.format`` call writes the whole line."""
        if len(event_dict) >= _BULK_KEYS:
            found = self._form(event_dict, skip)
            line = self._bulk(*found) if found is not None else None
            if line is not None:
                return line
        prefixes, by_type = self._prefixes, self._by_type
        parts = []
        for key, value in event_dict.items():
            if key in skip:
                continue
            prefix = prefixes.get(key) if type(key) is str else None
            plain = by_type.get(type(value))
            parts.append(
                (prefix or self._prefix(key)) + (plain(value) if plain is not None else self._other(value))
            )
        return "".join(parts)

    def fields_within(
        self, event_dict: Mapping[Any, Any], skip: Container[Any], room: int, width: int, widest: int
    ) -> tuple[str, int]:
        """``fields``, and 0; but for an event written in bulk that can't fit in ``width`` characters
        (each value as short as its type's text can be: ``0.0``, ``True``, an int's one digit), only
        its first fields, up to the last that can begin within ``room`` characters, and how many
        fields follow them (or, once an event of its form showed how many began within ``room``,
        about those: ``_Form.guess``). The whole line still when a field left out could hold a
        quote, a non-ASCII character or ``widest`` characters without a space (a long key, an int).
        So a capped text line of thousands of fields formats only those it can keep
        (``TextRenderer``)."""
        found = self._form(event_dict, skip)
        if found is None:  # not a wide event of numbers (looked at twice: rare)
            return self.fields(event_dict, skip), 0
        _plan, form, values = found
        lead = form.lead(room, width, widest) if not form.exponents else None
        if lead is not None:
            count, template, letters = lead
            try:
                line = template.format(*values)  # the values after the first count are not written
            except ValueError:  # an int beyond Python's int-to-str digit limit: the line as _bulk has it
                line = None
            if line is not None and form.rule_texts(line, letters):  # else an exponent: as _bulk has it
                return line, len(values) - count
        whole = self._bulk(*found)
        return (whole if whole is not None else self.fields(event_dict, skip)), 0

    def _form(
        self, event_dict: Mapping[Any, Any], skip: Container[Any]
    ) -> tuple[_Plan, _Form, tuple[Any, ...]] | None:
        """The plan of a wide event of plain ``str`` keys and plain number values, its form and values;
        ``None`` for any other event (written one field at a time)."""
        if len(event_dict) < _BULK_KEYS or not self._bulk_digits or type(skip) not in (frozenset, tuple):
            return None
        keys = tuple(event_dict)
        plan = self._last  # the same key set as the last event's, mostly: compared, not hashed
        if plan.keys != keys or plan.skip is not skip:
            plan = self._plans.get((skip, keys)) or _NO_PLAN
        if plan is _NO_PLAN or not _STR_ONLY.issuperset(map(type, keys)):  # never a str-like key's plan
            if not _STR_ONLY.issuperset(map(type, keys)):
                return None
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            kept = tuple(key for key in keys if key not in skip)
            if len(kept) < 2:  # nearly all skipped: the plain loop
                return None
            plan = self._plans[(skip, keys)] = _Plan(keys, skip, tuple(map(self._prefix, kept)))
        self._last = plan
        values = tuple(itertools.compress(event_dict.values(), plan.kept))  # keys in the plan's order
        kinds = tuple(map(type, values))
        form = plan.last
        if form.kinds != kinds:
            form = plan.forms.get(kinds) or _NO_FORM
            if form is _NO_FORM:
                if not PLAIN_NUMBERS.issuperset(kinds):
                    return None
                if len(plan.forms) >= _MAX_FORMS:
                    plan.forms.clear()
                form = plan.forms[kinds] = _Form(plan.prefixes, kinds, self._spec)
            plan.last = form
        return plan, form, values

    def _bulk(self, plan: _Plan, form: _Form, values: tuple[Any, ...]) -> str | None:
        """``fields`` for an event of plain ``str`` keys and plain number values (``_form``), or
        ``None`` (an int beyond Python's int-to-str digit limit)."""
        try:
            if not form.exponents:
                line = form.template.format(*values)
                if form.rule_texts(line, form.letters):
                    return line
            texts = list(map(format, values, form.specs))
        except ValueError:  # an int beyond Python's int-to-str digit limit
            return None
        # the texts apart, as in the line: "True" and "-0.5" make no "e-"
        form.exponents = not form.rule_texts(" ".join(texts), (form.words, 0, 0))
        if form.exponents:  # written by the rule itself
            by_type = self._by_type
            texts = [
                text if "e" not in text else by_type[type(value)](value)
                for text, value in zip(texts, values, strict=True)
            ]
        return "".join(map(operator.add, plan.prefixes, texts))

    def _prefix(self, key: object) -> str:
        """`` key=``: the key as a token between a space and ``=``; remembered for ``str`` keys."""
        if type(key) is not str:
            return f" {quote(safe_str(key))}="
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = f" {quote(key)}="
            if len(self._prefixes) < _MAX_KEYS:
                self._prefixes[key] = prefix
        return prefix

    def _other(self, value: Any) -> str:
        """A value of no plain type: subclasses by their base type's own value, never their
        (possibly raising) ``__str__``; anything else by its ``str()``, quoted when unsafe."""
        if isinstance(value, str):
            return quote(str.__str__(value))
        if isinstance(value, float):
            return self.float(float.__float__(value))
        if isinstance(value, int) and not isinstance(value, bool):
            return int_text(int.__int__(value))
        if type(value) in _NESTED:
            return quote(self._nested(value, set()))
        return quote(value_text(value))

    def _nested(self, value: Any, inside: set[int]) -> str:
        """A list, tuple or dict as its ``str()`` writes it, but each float in it, at any depth, by
        the float rule (``[0.5, 0.6]``, not ``[0.5, 0.6000000238418579]``); ``inside``: the ids of the
        containers being written, so one that holds itself is ``[...]``, as ``str()`` writes it."""
        kind = type(value)
        if kind is float:
            return self.float(value)
        if kind in _NESTED:
            if id(value) in inside:
                return _NESTED[kind]
            inside.add(id(value))
            try:
                if kind is dict:
                    nested = self._nested
                    items = [f"{nested(k, inside)}: {nested(v, inside)}" for k, v in value.items()]
                    return "{" + ", ".join(items) + "}"
                text = ", ".join([self._nested(item, inside) for item in value])
            finally:
                inside.discard(id(value))
            if kind is list:
                return f"[{text}]"
            return f"({text},)" if len(value) == 1 else f"({text})"
        if isinstance(value, float):
            return self.float(float.__float__(value))
        try:
            return repr(value)  # as str() of a list writes its items
        except Exception:  # a broken __repr__ costs its item, never the line
            return value_text(value)


def _rounding(digits: int) -> Callable[[float], str]:
    """The float rule for ``digits`` significant digits, its constants bound once (as structlog's
    ``TimeStamper`` picks its stamping closure once).

    ``%g``'s text is the rule's as it is when it has a point and no exponent (``3.224``). Up to 15
    digits (``_EXACT_DIGITS``) two more of its forms are the rule's text without a round trip through
    ``float`` and ``repr``: a whole number (``1234``, ``0``) plus ``.0``, and a negative exponent
    (``3e-05``) away from the subnormal numbers (``_NORMAL``): a decimal of 15 digits or fewer names
    one double, which ``repr`` writes back with those digits. A positive exponent (``1e+04`` for
    9999.7) goes through ``repr``."""
    limit, spec = 10.0**digits, f"%.{digits}g"  # format(value, ".4g")'s text, for less (no spec to parse)
    exact = digits <= _EXACT_DIGITS

    def rounded(value: float) -> str:
        if -limit < value < limit:  # also False for NaN and infinities
            text = spec % value
            if "e" not in text:
                if "." in text:
                    return text
                if exact:
                    return text + ".0"
            elif exact and "e-" in text and not -_NORMAL < value < _NORMAL:
                return text
            return repr(float(text))
        return repr(value) if not math.isfinite(value) else repr(float(round(value)))

    return rounded


def _float_repr(value: float) -> str:
    return repr(value)


_NESTED: dict[type, str] = {list: "[...]", tuple: "(...)", dict: "{...}"}
"""The containers whose floats the text line rounds, and how one written inside itself reads."""
_MAX_KEYS = 4096  # distinct keys whose tokens a ValueFormat keeps
_MAX_PLANS = 256  # key sets a ValueFormat keeps
_MAX_FORMS = 8  # patterns of value types a key set keeps
_EXACT_DIGITS = 15
"""Digits up to which ``format(x, ".N")`` with a negative exponent is the float rule's text: a decimal
of 15 digits or fewer names one double (``sys.float_info.dig``), so the rule's ``repr(float(text))``
gives it back; subnormal numbers, with fewer digits of their own, aside."""
_NORMAL = 1e-307
"""Above a double's smallest normal number (``sys.float_info.min``), so that a value at least this
large, rounded to any digits, is normal too (``_rounding``)."""
_BULK_KEYS = 16  # smaller events take the plain loop: the bulk path's set-up costs more there
_MAX_BULK_DIGITS = 17  # a double's most significant digits (see ValueFormat.__init__)
_STR_ONLY = frozenset({str})


class _Plan:
    """A key set (``keys``, written without ``skip``): its kept keys' `` key=`` prefixes, which of its
    keys are kept (``kept``, a selector for ``itertools.compress`` over the event's values: one C pass,
    where a lookup per key costs three times as much for keys built afresh), and the ``_Form`` of each
    pattern of value types met (``last``: the last used)."""

    __slots__ = ("forms", "kept", "keys", "last", "prefixes", "skip")

    def __init__(self, keys: tuple[Any, ...], skip: Any, prefixes: tuple[str, ...]) -> None:
        self.keys, self.skip = keys, skip
        self.kept = tuple(key not in skip for key in keys)
        self.prefixes = prefixes
        self.forms: dict[tuple[type, ...], _Form] = {}
        self.last = _NO_FORM


def _words(kinds: Sequence[type]) -> int:
    """How many values of these kinds are written as a word with an ``e`` (``True``, ``False``, ``None``)."""
    return sum(kind is bool or kind is type(None) for kind in kinds)


def _letters(prefixes: Sequence[str], kinds: Sequence[type]) -> tuple[int, int, int]:
    """How many ``e``, ``e-`` and ``e-3`` the fields' text holds but for their numbers: their prefixes'
    and the ``e`` of each word value (``_Form.rule_texts``)."""
    literal = "".join(prefixes)
    return literal.count("e") + _words(kinds), literal.count("e-"), literal.count("e-3")


class _Form:
    """How a key set's line is written for one pattern of value types: a ``str.format`` template of
    the prefixes and a ``format()`` spec per value (the float rule's ``.4`` for a float), and that spec
    alone per value.

    ``template.format(*values)`` writes the whole line in one C call. A float's text without an
    exponent is exactly what the float rule writes, and so is one with a negative exponent
    (``1.5e-07``) for 15 digits or fewer (``_EXACT_DIGITS``); one with a positive exponent
    (``1.234e+03``, where the rule writes ``1234.0``) is not, unless every digit is written
    (``float_digits=None``: ``format(x, "")`` is ``repr(x)``). So the line is kept when its value texts
    pass ``rule_texts``, else each value is formatted alone (``ValueFormat._bulk``). ``exponents``
    remembers that the last line needed that, so an event that keeps such a value is not formatted
    twice per step."""

    __slots__ = (
        "exponents",
        "kinds",
        "leads",
        "letters",
        "negative_exact",
        "pieces",
        "prefixes",
        "repr_exact",
        "specs",
        "template",
        "words",
    )

    def __init__(self, prefixes: tuple[str, ...], kinds: tuple[type, ...], spec: str) -> None:
        self.kinds = kinds
        self.specs = tuple(spec if kind is float else "" for kind in kinds)
        escaped = (prefix.replace("{", "{{").replace("}", "}}") for prefix in prefixes)
        fields = zip(escaped, self.specs, strict=True)
        self.pieces = [f"{prefix}{{:{spec}}}" for prefix, spec in fields]
        self.template = "".join(self.pieces)
        self.prefixes = prefixes
        self.leads: dict[tuple[int, int, int], tuple[int, str, tuple[int, int, int]] | None] = {}
        self.words = _words(kinds)
        self.letters = _letters(prefixes, kinds)
        self.repr_exact = spec == ""  # every digit: format(x, "") is repr(x), the rule itself
        self.negative_exact = self.repr_exact or int(spec[1:]) <= _EXACT_DIGITS
        self.exponents = False

    def lead(self, room: int, width: int, widest: int) -> tuple[int, str, tuple[int, int, int]] | None:
        """The first fields ``ValueFormat.fields_within`` writes for these bounds: their number, their
        template and their letters (see ``rule_texts``); ``None`` when the line may fit in ``width``
        or a field left out could hold a quote, a non-ASCII character or a run of ``widest``
        characters. Decided once per bounds."""
        bounds = (room, width, widest)
        if bounds in self.leads:
            return self.leads[bounds]
        if len(self.leads) >= _MAX_FORMS:
            self.leads.clear()
        prefixes, kinds = self.prefixes, self.kinds
        widths = (len(prefix) + _SHORTEST.get(kind, 1) for prefix, kind in zip(prefixes, kinds, strict=True))
        starts = list(itertools.accumulate(widths, initial=0))
        count = bisect.bisect_right(starts, room, 0, len(prefixes))  # fields that can begin within room
        lead = None
        if (
            starts[-1] > width  # can't fit, even with each value as short as its type's text can be
            and 2 <= count < len(prefixes)
            and int not in kinds[count:]  # an int of 4,000 digits would be a wide field
            and all(len(key) + 32 < widest and key.isascii() and '"' not in key for key in prefixes[count:])
        ):
            lead = (count, "".join(self.pieces[:count]), _letters(prefixes[:count], kinds[:count]))
        self.leads[bounds] = lead
        return lead

    def rule_texts(self, text: str, letters: tuple[int, int, int]) -> bool:
        """Whether the value texts in ``text`` are the float rule's. ``letters``: how many ``e``,
        ``e-`` and ``e-3`` the rest of ``text`` holds (the keys', and the ``e`` of each ``True``,
        ``False``, ``None``); each further ``e`` is an exponent, allowed when negative and not
        ``e-3``: a subnormal number's (``e-308`` and below) has fewer digits than a double's."""
        e, minus, minus_3 = letters
        exponents = text.count("e") - e
        return (
            exponents == 0
            or self.repr_exact
            or (
                self.negative_exact and exponents == text.count("e-") - minus and text.count("e-3") == minus_3
            )
        )


_SHORTEST: dict[type, int] = {float: 3, bool: 4, type(None): 4}
"""The shortest text of a value of these types (``0.0``, ``nan``, ``True``, ``None``; an int's is 1): a
line's length with every value that short is a bound below its own (``_Form.lead``)."""
_NO_FORM = _Form((), (), "")
_NO_PLAN = _Plan((), (), ())  # matches no event: its keys are none of a plan's (2 at least)


_DEFAULT = ValueFormat()


def format_value(value: Any, digits: int | None = DEFAULT_FLOAT_DIGITS) -> str:
    """A value as the text line writes it (see ``ValueFormat``)."""
    return (_DEFAULT if digits == DEFAULT_FLOAT_DIGITS else ValueFormat(digits))(value)


def format_key(key: object) -> str:
    """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``."""
    return _DEFAULT.key(key)


def format_fields(
    event_dict: Mapping[Any, Any],
    skip: Container[Any] = ("event",),
    digits: int | None = DEFAULT_FLOAT_DIGITS,
) -> str:
    """`` key=value`` for every key not in ``skip``, each with a leading space, in order."""
    return (_DEFAULT if digits == DEFAULT_FLOAT_DIGITS else ValueFormat(digits)).fields(event_dict, skip)
