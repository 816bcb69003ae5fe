"""What a secret is: the rules ``Redact`` hides secrets by, the words of keys and the look of values
(``docs/processors.md`` lists them)."""

from __future__ import annotations

import base64
import binascii
import functools
import re
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from speedtronic.record.safe_text import safe_repr, safe_str
from speedtronic.record.values import Truncated

__all__ = [
    "MAX_REDACTED_CHARS",
    "REDACTED",
    "ExceptionText",
    "is_path_key",
    "is_secret_key",
    "redact_exception",
    "redact_path",
    "redact_text",
]

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


# The key rule. A key is split into words (snake_case, kebab-case, camelCase, spaces; digits dropped:
# github_token_2 is "github token") and is secret when its words name a credential: password, passwd,
# passphrase, pwd, pw, secret, auth, authorization, bearer, jwt, cookie, credentials, sessionid;
# "key" after a kind of key (api_key, privateKey, ssh_key, signing_key); "token" as the last word or
# before "value" (hf_token), "tokens" after a kind of credential (api_tokens); "pass" after what it
# unlocks (db_pass). Glued words count too: a word holding password, passwd, passphrase or apikey is
# secret (PGPASSWORD), one ending in secret, token, privatekey, accesskey or secretkey is read as two
# words (clientsecret, hftoken), and two words that spell one are read as it (PassWord). Counts and
# rates of text tokens stay visible (tokens, num_tokens, tokens_per_s, max_tokens, pad_token,
# token_ids, tokenizer), and so do passes, pass@1, forward_pass, bypass, author, secretary.
# docs/processors.md (Redaction) lists it for users.
def is_secret_key(key: str) -> bool:
    """Whether a key's words name a credential (the rule in the comment above)."""
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


def _next_url(text: str, start: int, run_end: _Next, last_at: int) -> tuple[int, int, int] | None:
    """The first URL password at or after ``start``: where its URL starts, where the password starts
    and where it ends. A URL is a scheme (a letter at a word's start, then letters, digits, ``+``,
    ``.``, ``-``), ``://``, a user name, and a ``:`` not starting a port; its password ends at the last
    ``@`` before a space or quote, within 256 characters, else at the last ``@`` before a ``/``, ``?``
    or ``#``. Each ``://`` is looked at once, each ``@`` found with ``str.rfind`` and each stop
    character once, so text of many URL starts costs a few steps each (a regex looking for the last
    ``@`` backtracks through all 256 characters at each). ``last_at``: the text's last ``@``, found once
    per text (looked for again at each URL found, it would read the text's end again)."""
    at_sep = text.find("://", start)
    while at_sep != -1 and at_sep < last_at:
        user_end = _USER_END.search(text, at_sep + 3)
        if (  # a character of a scheme before this ://, and a user name ending at a : not before a port
            at_sep
            and text[at_sep - 1] in _SCHEME
            and user_end is not None
            and text[user_end.start()] == ":"
            and _PORT.match(text, user_end.end()) is None
        ):
            scheme = at_sep
            while scheme > start and text[scheme - 1] in _SCHEME:
                scheme -= 1
            while scheme < at_sep and not _scheme_starts(text, scheme):
                scheme += 1
            begin = user_end.end()
            if scheme < at_sep:
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


_SCHEME_FORMS = r"""
      (?P<bearer>\b(?:[Bb]earer|BEARER)\s+)(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/-]{8,}=*
    | (?P<basic>\b(?:[Bb]asic|BASIC)\s+)(?P<basic_value>[A-Za-z0-9+/]{4,}={0,2})
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----.*?(?:-----END[A-Z ]*PRIVATE\ KEY-----|\Z)
"""
"""Credentials written with a scheme or a marker: ``Bearer``/``Basic`` values, PEM private keys."""

_CREDENTIALS = re.compile(
    _SCHEME_FORMS
    + r"""
    | (?<![A-Za-z0-9])(?:
          [rs]k_(?:live|test)_[A-Za-z0-9]{8,}
        | gh[pousr]_[A-Za-z0-9]{20,}
        | github_pat_[A-Za-z0-9_]{20,}
        | (?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])
        | hf_[A-Za-z0-9]{30,}
        | xox[abposr]-[A-Za-z0-9-]{10,}
        | AIza[A-Za-z0-9_-]{35}
        | glpat-[A-Za-z0-9_-]{20,}
      )
    """,
    re.VERBOSE | re.DOTALL,
)

_SCHEME_CREDENTIALS = re.compile(_SCHEME_FORMS, re.VERBOSE | re.DOTALL)
"""``_CREDENTIALS`` less the key shapes: for a path, whose file and directory names are data."""


_CREDENTIAL_HINT = re.compile(
    r"://|[Bb]earer|BEARER|[Bb]asic|BASIC|-----BEGIN|[rs]k[-_]|gh[pousr]_|github_pat_|A[KS]IA|eyJ|hf_|xox"
    r"|AIza|glpat-"
)
"""A part every credential (``_CREDENTIALS``, ``_next_token``, ``_next_url``) holds: text without one is
passed over at a few times the speed (the full pattern tries each of its forms at each character)."""

_TOKEN_END = re.compile(r"[^A-Za-z0-9_-]")
_DIGIT = re.compile(r"[0-9]")
_TOKEN_STARTS = {
    "sk-": re.compile(r"(?<![A-Za-z0-9])sk-"),
    "eyJ": re.compile(r"(?<![A-Za-z0-9])eyJ"),
}


def _next_token(text: str, start: int, prefix: str) -> tuple[int, int] | None:
    """The first OpenAI/Anthropic key (``prefix`` ``sk-``: then 8 or more of ``[A-Za-z0-9_-]``, one a
    digit) or JWT (``eyJ``: three runs of ``[A-Za-z0-9_-]`` joined by dots, the first two at least 2
    long) at or after ``start``, not after a letter or digit: where it starts and ends.

    Each is the whole run of ``[A-Za-z0-9_-]`` after its prefix (no backtracking can give another
    match), so when the one starting first fails, every later start in the same run fails too (its
    run is the same run's end): the search goes on past the run. So ``sk-sk-sk-...`` costs each
    character once, where a regex's look-ahead for the digit read the rest of the run at each start.
    """
    starts = _TOKEN_STARTS[prefix]
    found = starts.search(text, start)
    while found is not None:
        at = found.end()
        end = _run_end(text, at)
        if prefix == "sk-":
            if end - at >= 8 and _DIGIT.search(text, at, end) is not None:
                return found.start(), end
        elif end - at >= 2 and text.startswith(".", end):
            second = _run_end(text, end + 1)
            if second - end > 2 and text.startswith(".", second):
                return found.start(), _run_end(text, second + 1)
        found = starts.search(text, end)
    return None


def _run_end(text: str, at: int) -> int:
    """Where the run of ``[A-Za-z0-9_-]`` starting at ``at`` ends."""
    end = _TOKEN_END.search(text, at)
    return end.start() if end is not None else len(text)


def _credentials(text: str, replacement: str, shapes: bool = True) -> str:
    """``text`` with every credential replaced: URL passwords (``_next_url``), ``_CREDENTIALS``, and
    keys and JWTs (``_next_token``), leftmost first, a URL first where it starts where another does
    (one regex's alternation, in effect). Each finder goes on from where the last replacement ended.
    Without ``shapes``, keys known by their shape alone (``sk-...``, ``ghp_...``, JWTs) are left."""
    credentials = _CREDENTIALS if shapes else _SCHEME_CREDENTIALS
    parts: list[str] = []
    done = 0
    never = len(text) + 1  # where a finder that found nothing would start
    run_end = _Next(_RUN_END, text)
    last_at = text.rfind("@")
    url = _next_url(text, 0, run_end, last_at)
    other = credentials.search(text)
    key = _next_token(text, 0, "sk-") if shapes else None
    jwt = _next_token(text, 0, "eyJ") if shapes else None
    at_url = url[0] if url is not None else never
    at_other = other.start() if other is not None else never
    at_key = key[0] if key is not None else never
    at_jwt = jwt[0] if jwt is not None else never
    while True:
        if at_url <= at_other and at_url <= at_key and at_url <= at_jwt:
            if url is None:
                break
            _, begin, done_at = url
            parts += (text[done:begin], replacement)
        elif at_other <= at_key and at_other <= at_jwt:
            assert other is not None
            parts += (text[done:at_other], _credential(other, replacement))
            done_at = other.end()
        else:
            start, done_at = key if at_key <= at_jwt else jwt  # type: ignore[misc]  # one is found
            parts += (text[done:start], replacement)
        done = done_at
        if at_url < done:
            url = _next_url(text, done, run_end, last_at)
            at_url = url[0] if url is not None else never
        if at_other < done:
            other = credentials.search(text, done)
            at_other = other.start() if other is not None else never
        if at_key < done:
            key = _next_token(text, done, "sk-")
            at_key = key[0] if key is not None else never
        if at_jwt < done:
            jwt = _next_token(text, done, "eyJ")
            at_jwt = jwt[0] if jwt is not None else never
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


_is_secret_text_key = functools.lru_cache(maxsize=1024)(is_secret_key)
"""``is_secret_key``, remembered: text with many ``key=value`` pairs names few keys, again and again."""

_KEY_STEMS = ("pass", "pw", "secret", "cred", "auth", "bearer", "jwt", "cookie", "session", "key", "token",
              "csrf", "xsrf")  # fmt: skip
"""A part of every word ``is_secret_key`` can find: text without one holds no secret key."""

_KEY_VALUE = re.compile(
    r"""
    (?<![A-Za-z0-9_.-])(?=[A-Za-z0-9_.-])  # a whole key, not the end of a longer one
    (?=[A-Za-z0-9_.-]*?(?:[ ][A-Za-z0-9_.-]*?){0,2}(?i:"""
    + "|".join(_KEY_STEMS)
    + r"""))
    (?=(?P<key>[A-Za-z0-9_.-]+(?:[ ][A-Za-z0-9_.-]+){0,2}))(?P=key)  # never backtracking (atomic)
    (?P<head>
        \\?["']?[ \t]*[=:](?=(?P<gap>[ \t]*))(?P=gap)  # spaces taken whole: no value starts with one
        (?:[bBrRuUfF]{0,2}\\?(?:(?P<dq>")|(?P<sq>')))?  # b'...', r"...": Python's literals
        (?:(?:[Bb]earer|BEARER|[Bb]asic|BASIC|[Tt]oken|TOKEN|[Dd]igest|Bot)[ \t]+)?
    )
    (?(dq)(?:[^"\\\n]|\\.)+|(?(sq)(?:[^'\\\n]|\\.)+|[^\s"'\\&,;]+))
    """,
    re.VERBOSE,
)
"""``key=value``, ``key: value``, ``"key": "value"``: the value is hidden when the key is secret
(``is_secret_key``). Only keys holding a part of a secret word are looked at."""


def _key_values(text: str, replacement: str) -> str:
    """``text`` with the value after each secret key replaced (``_KEY_VALUE``). A quoted value after a
    key that is not secret is text of its own, looked into once (``KeyError: 'password=...'``); one
    inside it is judged, not looked into again, so each character is read at most twice."""
    parts: list[str] = []
    done = at = inside = 0
    while (match := _KEY_VALUE.search(text, at)) is not None:
        if _is_secret_text_key(match["key"]):
            parts += (text[done : match.start()], match["key"], match["head"], replacement)
            done = at = match.end()
        elif (match["dq"] is not None or match["sq"] is not None) and match.start() >= inside:
            at, inside = match.end("head"), match.end()
        else:
            at = match.end()
    return "".join(parts) + text[done:] if parts else text


MAX_REDACTED_CHARS = 1_000_000
"""The longest text ``redact_text`` reads: a longer one is cut to a ``<truncated: ...>`` marker holding
its start, redacted (the text log's and JSONL's line cap, 32,000 bytes by default, would cut it anyway)."""

_CUT_MARGIN = 4096
"""Characters redacted past the cut of a text longer than ``MAX_REDACTED_CHARS``, then dropped: a
credential that the cut splits (every one ``redact_text`` knows but a PEM key, which is redacted to the
cut, is shorter) is redacted whole or not kept."""


def redact_text(text: str, replacement: str = REDACTED) -> str:
    """``text`` with every credential-looking part replaced (``Bearer [REDACTED]``,
    ``postgres://u:[REDACTED]@h/db``, ``password=[REDACTED]``); for free text such as an exception's
    message or traceback. Returns ``text`` itself when nothing is replaced.

    Its cost is linear in the text's length, whatever the text (``benchmarks/redact_fuzz.py``), and a
    text longer than ``MAX_REDACTED_CHARS`` is cut first: ``<truncated: str of 5,000,000 chars; first
    1,000,000 chars: ...>``, those characters redacted."""
    if len(text) < 4:  # shorter than the shortest match, "pw=x"
        return text
    if len(text) > MAX_REDACTED_CHARS:
        head = _redacted(text[: MAX_REDACTED_CHARS + _CUT_MARGIN], replacement)
        head = head[: min(MAX_REDACTED_CHARS, len(head) - _CUT_MARGIN)]
        return Truncated(f"<truncated: str of {len(text):,} chars; first {len(head):,} chars: {head}>")
    return _redacted(text, replacement)


def _redacted(text: str, replacement: str, shapes: bool = True) -> str:
    new = text
    if _CREDENTIAL_HINT.search(new) is not None:
        new = _credentials(new, replacement, shapes)
    if _may_hold_key_value(new):
        new = _key_values(new, replacement)
    return text if new == text else new


_PATH_WORDS = frozenset({
    "path", "paths", "dir", "dirs", "directory", "directories", "folder", "folders", "file", "files",
    "filename", "filenames", "filepath", "filepaths", "dirname", "pathname",
})  # fmt: skip


@functools.lru_cache(maxsize=1024)
def is_path_key(key: str) -> bool:
    """Whether a key names a path: its last word is ``path``, ``dir``, ``file``, ``folder``...
    (``path``, ``run_dir``, ``checkpoint_path``, ``log_file``, ``outputDir``) and it is no secret key."""
    words = _WORDS.findall(key)
    return bool(words) and words[-1].lower() in _PATH_WORDS and not is_secret_key(key)


def redact_path(text: str, replacement: str = REDACTED) -> str:
    """A path's text, redacted as a path: the names of its files and directories are data, so keys
    known by their shape alone (``sk-...``, ``ghp_...``, ``AKIA...``, JWTs) are not looked for in them
    (a run directory named ``sk-learn-run1`` is a name, and a path with a part replaced opens nothing);
    all else ``redact_text`` hides still is (``password=...``, ``Bearer ...``). Its query string
    (after ``?``) is text, redacted as any text; so is a URL (``://``: ``s3://u:[REDACTED]@bucket/...``,
    the names in it included). Returns ``text`` itself when nothing is replaced."""
    if "://" in text or len(text) > MAX_REDACTED_CHARS:
        return redact_text(text, replacement)
    path, mark, query = text.partition("?")
    shown = _redacted(path, replacement, shapes=False) if len(path) >= 4 else path
    if mark:
        shown += mark + redact_text(query, replacement)
    return text if shown == text else shown


class ExceptionText(NamedTuple):
    """An exception as it may leave the process, each part redacted (``redact_exception``)."""

    line: str
    """``"ValueError: password=[REDACTED]"``: its type's name and its message, as a record writes it."""
    message: str
    """Its message (``str()``), redacted."""
    printed: str
    """Its whole traceback as Python prints it: the stack, the message, its notes, and each cause and
    context with theirs; redacted."""
    hidden: bool
    """Whether anything was hidden anywhere in the whole (message, ``repr``, notes, a cause or context,
    the printed stack): an exception with nothing hidden may leave as it is."""


_MAX_CHAINED = 100  # exceptions looked at in one chain (causes, contexts, group members)


def redact_exception(
    error: BaseException,
    replacement: str = REDACTED,
    *,
    text: Callable[[str], str] | None = None,
    args: Callable[[tuple[Any, ...]], Any] | None = None,
) -> ExceptionText:
    """``error`` redacted as a whole, for every place an exception leaves the process: its message,
    its ``repr``, its notes (``add_note``), every exception in its chain (``__cause__``,
    ``__context__``, an exception group's members) with theirs, and its printed traceback.

    Text goes through ``text`` (default ``redact_text``), and each exception's ``args`` through
    ``args`` (default: an argument after one naming a secret, ``ValueError("password", X)`` or
    ``("--token", X)``, is hidden; ``Redact`` passes its own walk, with its own patterns): a hidden
    argument is hidden in the message and wherever its ``repr`` is printed. ``hidden`` says whether
    anything was: an exception whose whole shows no secret may be passed on as it is, any other only
    as this text.
    """
    redact = text if text is not None else functools.partial(redact_text, replacement=replacement)
    judge = args if args is not None else functools.partial(_shown_args, replacement=replacement)
    hidden = False
    printed = _printed(error)
    top_message = ""
    for number, member in enumerate(_chained(error)):
        message = safe_str(member)
        given = getattr(member, "args", ())
        shown_args = judge(given) if type(given) is tuple else given
        if shown_args is not given:  # ("password", "hunter2"): a pair no text rule sees
            hidden = True
            shown = safe_str(shown_args[0] if len(shown_args) == 1 else tuple(shown_args))
            printed = printed.replace(message, shown)
            for before, after in zip(given, shown_args, strict=True):
                if before is not after:
                    printed = printed.replace(safe_repr(before), safe_repr(after))
            message = shown
        new = redact(message)
        written = safe_repr(member)
        hidden = hidden or new != message or redact(written) != written
        notes = getattr(member, "__notes__", None)
        if isinstance(notes, list | tuple):
            hidden = hidden or any(redact(note) != note for note in notes if isinstance(note, str))
        if number == 0:
            top_message = new
    shown_printed = redact(printed)
    hidden = hidden or shown_printed != printed
    name = type(error).__name__
    return ExceptionText(
        f"{name}: {top_message}" if top_message else name, top_message, shown_printed, hidden
    )


def _printed(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:
        return f"<traceback of {type(error).__qualname__} could not be formatted>"


def _chained(error: BaseException) -> list[BaseException]:
    """``error`` first, then every exception reachable from it (causes, contexts, group members),
    each once, at most ``_MAX_CHAINED``."""
    found: list[BaseException] = []
    seen: set[int] = set()
    todo = [error]
    while todo and len(found) < _MAX_CHAINED:
        member = todo.pop(0)
        if id(member) in seen:
            continue
        seen.add(id(member))
        found.append(member)
        members = getattr(member, "exceptions", None)  # an exception group's
        linked = [
            member.__cause__,
            member.__context__,
            *(members if isinstance(members, tuple | list) else ()),
        ]
        todo += [other for other in linked if isinstance(other, BaseException)]
    return found


def _shown_args(args: tuple[Any, ...], replacement: str) -> tuple[Any, ...]:
    """``args`` with each argument after one naming a secret (``"password"``, ``"--token"``) replaced;
    ``args`` itself when none is."""
    shown = list(args)
    for i in range(1, len(args)):
        name = args[i - 1]
        if type(name) is str and name.strip() and is_secret_key(name.lstrip("-")):
            shown[i] = replacement
    return tuple(shown) if shown != list(args) else args


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
