"""What a secret is: the rules ``Redact`` (``speedtronic.processors.redact``) hides secrets by.

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

import base64
import binascii
import re

__all__ = ["REDACTED", "is_secret_key", "redact_text"]

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
