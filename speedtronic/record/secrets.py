"""``Redact``: hides secrets from every sink and hook, by the words of their keys and the look of values.

Two rules, each on by default:

- **Keys.** A key is split into words (``snake_case``, ``kebab-case``, ``camelCase``, spaces; digits
  dropped: ``github_token_2`` is ``github token``), and is secret when its words name a credential
  (``is_secret_key``): ``password``, ``passwd``, ``passphrase``, ``pwd``, ``pw``, ``secret``, ``auth``,
  ``authorization``, ``bearer``, ``jwt``, ``cookie``, ``credentials``, ``sessionid``/``session_id``;
  ``key`` after a kind of key (``api_key``, ``privateKey``, ``access-key``, ``ssh_key``,
  ``signing_key``); ``token`` as the last word or before ``value`` (``hf_token``, ``token_value``),
  and ``tokens`` after a kind of credential (``api_tokens``); ``pass`` after what it unlocks
  (``db_pass``). Words glued without a separator count too: a word holding ``password``, ``passwd``,
  ``passphrase`` or ``apikey`` anywhere is secret (``PGPASSWORD``, ``userpassword``,
  ``REDISPASSWORD``), and a word ending in ``secret``, ``token``, ``privatekey``, ``accesskey`` or
  ``secretkey`` is judged as two words (``clientsecret``, ``hftoken``), and two words that spell
  one are read as it (``PassWord``). Counts and rates of text
  tokens stay visible: ``tokens``, ``num_tokens``, ``tokens_per_s``, ``max_tokens``, ``maxtokens``,
  ``pad_token``, ``token_ids``, ``tokenizer``, and so do ``passes``, ``pass@1``, ``forward_pass``,
  ``bypass``, ``author``, ``secretary``. Your own ``fnmatch`` patterns add to this rule.
- **Values.** Text that looks like a well-known credential is replaced under any key (``redact_text``):
  ``Bearer``/``Basic`` authorization values, OpenAI/Anthropic (``sk-...``), Stripe, GitHub (``ghp_``,
  ``github_pat_``), AWS (``AKIA...``), Hugging Face (``hf_...``), Slack, Google and GitLab keys, JWTs,
  PEM private keys; the password of a URL (``postgres://user:[REDACTED]@host/db``: everything between
  the user's ``:`` and the last ``@`` before the next space, so a raw ``/``, ``?`` or ``@`` in the
  password (up to 256 characters with a ``/``, ``?`` or ``#``: each URL start looks that far) and an
  ``@`` in the user name are covered; a ``:`` followed by digits and ``/`` is a port);
  and the value of a secret key written in text (``password=[REDACTED]``, ``password: [REDACTED]``,
  ``?token=[REDACTED]&``, ``'api_key': '[REDACTED]'``, ``"secret": "[REDACTED]"``,
  ``Authorization: Token [REDACTED]``, ``api key: [REDACTED]``: a key of up to three words written
  with spaces): a quoted value up to its closing quote, an unquoted one up to a space, quote, ``&``,
  ``,`` or ``;``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import fnmatch
import functools
import operator
import re
import sys
import types
from collections import UserList, deque
from collections.abc import Callable, Iterable, Mapping, MappingView
from typing import Any

from structlog.typing import EventDict, WrappedLogger

from speedtronic.processors.convert import (
    MAX_DEPTH,
    PLAIN_NUMBERS,
    Converted,
    Truncated,
    _Seen,
    to_python,
)
from speedtronic.record import free_name
from speedtronic.strings import safe_repr, safe_str

__all__ = ["REDACTED", "Redact", "is_secret_key", "redact_text"]

REDACTED = "[REDACTED]"

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
"""A key's words: ``privateKey`` -> private, Key; ``APIKey`` -> API, Key; ``token_2`` -> token, 2."""

_SECRET_WORDS = frozenset({
    "password", "passwords", "passwd", "passphrase", "pwd", "pw", "secret", "secrets", "credential",
    "credentials", "creds", "auth", "authorization", "oauth", "bearer", "jwt", "cookie", "cookies",
    "sessionid", "apikey", "apikeys", "privatekey", "accesskey", "secretkey", "csrf", "xsrf",
})  # fmt: skip
_KEY_KINDS = frozenset({
    "api", "private", "access", "secret", "ssh", "signing", "sign", "encryption", "decryption", "master",
    "client", "license", "licence", "gpg", "pgp", "aws", "auth", "session", "account", "hmac", "deploy",
    "service", "subscription", "openai", "anthropic", "wandb", "hf", "pem", "rsa", "jwt", "webhook",
})  # fmt: skip
_TOKEN_KINDS = frozenset({
    "api", "access", "auth", "refresh", "bearer", "github", "gh", "hf", "hub", "oauth", "session", "id",
    "csrf", "secret", "personal", "service", "deploy", "bot", "slack", "wandb", "aws", "security",
})  # fmt: skip
_TEXT_TOKENS = frozenset({
    "pad", "eos", "bos", "unk", "cls", "sep", "mask", "special", "start", "end", "stop", "new", "next",
    "first", "last", "num", "n", "max", "min", "total", "avg", "mean", "input", "output", "prompt",
    "completion", "generated", "vocab", "per",
})  # fmt: skip
_TOKEN_VALUE_WORDS = frozenset({"value", "str", "string", "text", "raw", "plain"})
_PASS_KINDS = frozenset({
    "db", "database", "user", "username", "admin", "root", "login", "ssh", "smtp", "ftp", "mysql",
    "postgres", "pg", "redis", "mongo", "proxy", "wifi", "vault", "account", "sudo", "mail", "email",
})  # fmt: skip


_GLUED_SECRETS = ("password", "passwd", "passphrase", "apikey")
"""Words secret wherever they stand inside a key's word: ``PGPASSWORD``, ``userpassword``."""

_GLUED_END = re.compile(r"([a-z]+?)(secrets?|tokens?|privatekey|accesskey|secretkey)")
"""A word ending in a credential word, split in two and judged as two words: ``clientsecret`` is
``client secret``, ``hftoken`` is ``hf token`` (secret), ``maxtokens`` is ``max tokens`` (a count)."""


def _words(key: str) -> list[str] | None:
    """A key's lowercased words, glued ones split; ``None`` when a word holds a secret word."""
    words: list[str] = []
    for word in _WORDS.findall(key):
        if word.isdigit():
            continue
        word = word.lower()
        if any(secret in word for secret in _GLUED_SECRETS):
            return None
        glued = _GLUED_END.fullmatch(word)
        words += glued.groups() if glued is not None else (word,)
    return words


def is_secret_key(key: str) -> bool:
    """Whether a key's words name a credential (the rule in this module's docstring)."""
    words = _words(key)
    if words is None:
        return True
    for i, word in enumerate(words):
        before = words[i - 1] if i else ""
        after = words[i + 1] if i + 1 < len(words) else ""
        if (
            word in _SECRET_WORDS
            or word + after in _SECRET_WORDS  # two words that spell one: PassWord, Pass_Phrase
            or (word in ("key", "keys") and before in _KEY_KINDS)
            or (word in ("token", "tokens") and before in _TOKEN_KINDS)
            or (word == "token" and after in ("", *_TOKEN_VALUE_WORDS) and before not in _TEXT_TOKENS)
            or (word == "pass" and before in _PASS_KINDS)
            or (word == "id" and before == "session")
        ):
            return True
    return False


_SCHEME = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_USER_END = re.compile(r'[\s/?#:"<>]')
_PORT = re.compile(r'\d*(?:[/?#"<>]|\s|$)')
_RUN_END = re.compile(r'[\s"<>]')
_PATH_END = re.compile(r'[\s/?#"<>]')


def _next_url(text: str, start: int, run_end: _Next) -> tuple[int, int, int] | None:
    """The first URL password at or after ``start``: where its URL starts, where the password starts
    and where it ends. A URL is a scheme (a letter at a word's start, then letters, digits, ``+``,
    ``.``, ``-``), ``://``, a user name, and a ``:`` not starting a port; its password ends at the last
    ``@`` before a space or quote, within 256 characters, else at the last ``@`` before a ``/``, ``?``
    or ``#``. Each ``://`` is looked at once, each ``@`` found with ``str.rfind`` and each stop
    character once, so text of many URL starts costs a few steps each (a regex looking for the last
    ``@`` backtracks through all 256 characters at each)."""
    last_at = text.rfind("@")
    at_sep = text.find("://", start)
    while at_sep != -1 and at_sep < last_at:
        if not at_sep or text[at_sep - 1] not in _SCHEME:  # no scheme before this ://
            at_sep = text.find("://", at_sep + 3)
            continue
        scheme = at_sep
        while scheme > start and text[scheme - 1] in _SCHEME:
            scheme -= 1
        while scheme < at_sep and not _scheme_starts(text, scheme):
            scheme += 1
        user_end = _USER_END.search(text, at_sep + 3)
        if scheme < at_sep and user_end is not None and text[user_end.start()] == ":":
            begin = user_end.end()
            if _PORT.match(text, begin) is None:
                at = text.rfind("@", begin + 1, begin + 257)
                window = begin + 257
                if at != -1:  # within 256 characters: the last one before a space or quote
                    window = run_end.at(begin, begin + 257)
                    at = text.rfind("@", begin + 1, window)
                if at == -1 and window == begin + 257:  # else a stop within the window ends both forms
                    # the search stops at the next ://'s slash: each character is looked at once
                    stop = _PATH_END.search(text, begin, last_at + 1)
                    at = text.rfind("@", begin + 1, stop.start() if stop is not None else last_at + 1)
                if at != -1:
                    return scheme, begin, at
                if window < begin + 257:  # no @ before this stop: no URL before it can end at one
                    at_sep = text.find("://", window)
                    continue
        at_sep = text.find("://", at_sep + 3)
    return None


class _Next:
    """Where ``pattern`` first matches in ``text`` between a position and a limit. Positions and limits
    asked for only grow during one ``redact_text``, and what was scanned is remembered, so each
    character is scanned once however many URL starts ask (``sp@``: many starts before one far
    ``@`` behind a space)."""

    __slots__ = ("_hi", "_hit", "_lo", "_pattern", "_text")

    def __init__(self, pattern: re.Pattern[str], text: str) -> None:
        self._pattern, self._text = pattern, text
        self._lo = self._hi = 0  # no match in text[lo:hi]; one at hi when _hit
        self._hit = False

    def at(self, position: int, limit: int) -> int:
        """The first match's position in ``[position, limit)``, else ``limit``."""
        if not self._lo <= position <= self._hi:
            self._lo = self._hi = position
            self._hit = False
        if not self._hit and self._hi < limit:
            match = self._pattern.search(self._text, self._hi, limit)
            self._hi, self._hit = (match.start(), True) if match is not None else (limit, False)
        return self._hi if self._hit and self._hi < limit else limit


def _scheme_starts(text: str, at: int) -> bool:
    """Whether a scheme may start at ``at``: an ASCII letter at a word's start (a regex's ``\\b``,
    whose ``\\w`` is a letter or digit of any script, or ``_``)."""
    char = text[at]
    if not (char.isascii() and char.isalpha()):
        return False
    before = text[at - 1] if at else " "
    return not (before.isalnum() or before == "_")


_CREDENTIALS = re.compile(
    r"""
      (?P<bearer>\b(?:[Bb]earer|BEARER)\s+)(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/-]{8,}=*
    | (?P<basic>\b(?:[Bb]asic|BASIC)\s+)(?P<basic_value>[A-Za-z0-9+/]{4,}={0,2})
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----.*?(?:-----END[A-Z ]*PRIVATE\ KEY-----|\Z)
    | (?<![A-Za-z0-9])(?:
          sk-(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{8,}
        | [rs]k_(?:live|test)_[A-Za-z0-9]{8,}
        | gh[pousr]_[A-Za-z0-9]{20,}
        | github_pat_[A-Za-z0-9_]{20,}
        | (?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])
        | eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*
        | hf_[A-Za-z0-9]{30,}
        | xox[abposr]-[A-Za-z0-9-]{10,}
        | AIza[A-Za-z0-9_-]{35}
        | glpat-[A-Za-z0-9_-]{20,}
      )
    """,
    re.VERBOSE | re.DOTALL,
)


_CREDENTIAL_HINT = re.compile(
    r"://|[Bb]earer|BEARER|[Bb]asic|BASIC|-----BEGIN|[rs]k[-_]|gh[pousr]_|github_pat_|A[KS]IA|eyJ|hf_|xox"
    r"|AIza|glpat-"
)
"""A part every ``_CREDENTIALS`` match holds: text without one is passed over at a few times the speed
(the full pattern tries each of its forms at each character)."""


def _credentials(text: str, replacement: str) -> str:
    """``text`` with every credential replaced: URL passwords (``_next_url``) and ``_CREDENTIALS``,
    leftmost first, a URL first where both start at one place (one regex's alternation, in effect)."""
    parts: list[str] = []
    done = 0
    run_end = _Next(_RUN_END, text)
    url = _next_url(text, 0, run_end)
    other = _CREDENTIALS.search(text)
    while url is not None or other is not None:
        if url is not None and (other is None or url[0] <= other.start()):
            start, begin, end = url
            parts += (text[done:begin], replacement)
        else:
            assert other is not None
            start, end = other.span()
            parts += (text[done:start], _credential(other, replacement))
        done = end
        if url is not None and url[0] < done:
            url = _next_url(text, done, run_end)
        if other is not None and other.start() < done:
            other = _CREDENTIALS.search(text, done)
    return "".join(parts) + text[done:] if parts else text


def _credential(match: re.Match[str], replacement: str) -> str:
    if match["bearer"] is not None:
        return match["bearer"] + replacement
    if match["basic"] is not None:  # Basic credentials are base64 of "user:password"
        try:
            decoded = base64.b64decode(match["basic_value"], validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return match.group()
        return match["basic"] + replacement if ":" in decoded else match.group()
    return replacement


_KEY_STEMS = ("pass", "pw", "secret", "cred", "auth", "bearer", "jwt", "cookie", "session", "key", "token",
              "csrf", "xsrf")  # fmt: skip
"""A part of every word ``is_secret_key`` can find: text without one holds no secret key."""

_KEY_VALUE = re.compile(
    r"""
    (?<![A-Za-z0-9_.-])  # a whole key, not the end of a longer one
    (?=[A-Za-z0-9_.-]*?(?:[ ][A-Za-z0-9_.-]*?){0,2}(?i:"""
    + "|".join(_KEY_STEMS)
    + r"""))
    (?=(?P<key>[A-Za-z0-9_.-]+(?:[ ][A-Za-z0-9_.-]+){0,2}))(?P=key)  # never backtracking (atomic)
    (?P<head>
        \\?["']?[ \t]*[=:][ \t]*(?:\\?(?:(?P<dq>")|(?P<sq>')))?
        (?:(?:[Bb]earer|BEARER|[Bb]asic|BASIC|[Tt]oken|TOKEN|[Dd]igest|Bot)[ \t]+)?
    )
    (?(dq)(?:[^"\\\n]|\\.)+|(?(sq)(?:[^'\\\n]|\\.)+|[^\s"'\\&,;]+))
    """,
    re.VERBOSE,
)
"""``key=value``, ``key: value``, ``"key": "value"``: the value is hidden when the key is secret
(``is_secret_key``). Only keys holding a part of a secret word are looked at."""


def _key_value(match: re.Match[str], replacement: str) -> str:
    if not is_secret_key(match["key"]):
        return match.group()
    return match["key"] + match["head"] + replacement


def redact_text(text: str, replacement: str = REDACTED) -> str:
    """``text`` with every credential-looking part replaced (``Bearer [REDACTED]``,
    ``postgres://u:[REDACTED]@h/db``, ``password=[REDACTED]``); for free text such as an exception's
    message or traceback. Returns ``text`` itself when nothing is replaced."""
    if len(text) < 4:  # shorter than the shortest match, "pw=x"
        return text
    new = text
    if _CREDENTIAL_HINT.search(new) is not None:
        new = _credentials(new, replacement)
    if _may_hold_key_value(new):
        new = _KEY_VALUE.sub(lambda match: _key_value(match, replacement), new)
    return text if new == text else new


def _may_hold_key_value(text: str) -> bool:
    """Whether ``text`` has a separator and a part of a secret word: the cheap test before the regex."""
    if "=" not in text and ":" not in text:
        return False
    lowered = text.lower()
    for stem in _KEY_STEMS:  # noqa: SIM110  # a loop: 2.5x faster than any() on short text (0.9 us)
        if stem in lowered:
            return True
    return False


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

    __slots__ = ("_judge", "_last", "_plans", "_replacement", "_text")

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
        seen: _Seen | None = None
        for key in others:
            value = event_dict[key]
            if type(value) is str:
                event_dict[key] = self._text(value)
            elif type(value) not in PLAIN_NUMBERS:
                seen = seen or _Seen()
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
        seen: _Seen | None = None
        renamed = False
        for key, value in event_dict.items():
            if key == "event":
                continue
            secret, name = self._judge(key) if type(key) is str else (self._is_secret(key), key)
            if secret:
                event_dict[key] = self._replacement
            elif type(value) is str:
                event_dict[key] = self._text(value)
            elif type(value) not in PLAIN_NUMBERS:
                seen = seen or _Seen()
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

    def _scrub(self, value: Any, depth: int, seen: _Seen) -> Any:
        """``value`` with its secrets replaced: the same object when it holds none.

        A value that can't be looked at (an attribute lookup raises: a ``LocalProxy`` outside its
        context, a lazy object that fails to load) becomes its text, redacted, so the record is kept.
        """
        try:
            return self._scrub_value(value, depth, seen)
        except Exception:
            return Converted(self._text(safe_str(value)))

    def _scrub_value(self, value: Any, depth: int, seen: _Seen) -> Any:
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

    def _scrub_container(self, value: Any, fields: dict[str, Any] | None, depth: int, seen: _Seen) -> Any:
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

    def _scrub_mapping(self, value: Mapping[Any, Any], depth: int, seen: _Seen) -> Any:
        changed = False
        out: dict[Any, Any] = {}
        counters: dict[str, int] = {}
        for key, item in list(value.items()):
            secret, name = self._judge(key) if type(key) is str else (self._is_secret(key), key)
            new = self._replacement if secret else self._scrub(item, depth + 1, seen)
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

    def _scrub_leaf(self, value: Any, depth: int, seen: _Seen) -> Any:
        """A value not opened: a numpy array of objects or text is converted and scrubbed; an
        exception whose ``args`` hold a secret (``("password", "hunter2")``) becomes its text with
        those args redacted; anything else whose text (``str()``, or ``repr()`` as containers show
        it) holds a credential becomes that text, redacted."""
        if _is_text_array(value):
            converted = to_python(value)
            scrubbed = self._scrub(converted, depth, seen)
            return value if scrubbed is converted and isinstance(converted, list) else scrubbed
        if self._text is _unchanged_text or _is_numeric(value):
            return value
        text = safe_str(value)
        new = self._text(text)
        if new is text and type(value).__str__ is not _DEFAULT_STR:
            text = safe_repr(value)
            new = self._text(text)
        if new is text and isinstance(value, BaseException) and type(value.args) is tuple:
            args = self._scrub(value.args, depth, seen)
            if args is not value.args:  # ("password", "hunter2"): a pair no text rule sees
                shown = safe_str(args[0] if len(args) == 1 else tuple(args))
                return Converted(f"{type(value).__name__}: {shown}")
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
