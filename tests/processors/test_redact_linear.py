"""``redact_text`` is linear for every input, cuts what is longer than its cap, and redacts as before.

Speed is measured in ``benchmarks/redact_fuzz.py`` (``make bench``); here: the output on known text is
what it was before the linear rewrite, the adversarial texts of every form give the right output, the
cap cuts a long text with its secrets hidden, and the texts that took an hour (``sk-sk-sk-...`` at a
million characters) finish (a hang guard of minutes, for work of about a second).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from speedtronic.processors.redact import MAX_REDACTED_CHARS, REDACTED, redact_text
from tests.reliability.conftest import child_env

KNOWN = [  # (text, its redaction before the rewrite: computed by the quadratic code)
    (
        'File "/home/u/train.py", line 12, in main\nValueError: lr=0.1 at step 7',
        'File "/home/u/train.py", line 12, in main\nValueError: lr=0.1 at step 7',
    ),
    (
        "loss=0.52 tokens_per_s=1234.5 max_tokens=2048 step=7",
        "loss=0.52 tokens_per_s=1234.5 max_tokens=2048 step=7",
    ),
    ("Authorization: Bearer abcdef123456.xyz", "Authorization: Bearer [REDACTED]"),
    ("Basic dXNlcjpwYXNz and Basic bm9jb2xvbg==", "Basic [REDACTED] and Basic bm9jb2xvbg=="),
    ("key sk-proj-abc123DEF456ghi789 in use", "key [REDACTED] in use"),
    ("sk-learn-run1/checkpoint-step-10.pt", "[REDACTED]/checkpoint-step-10.pt"),
    (
        "sk-abcdefgh sk-abcdefg1 -sk-aaaa1aaaa_bbbb xsk-abcdefg123",
        "sk-abcdefgh [REDACTED] -[REDACTED] xsk-abcdefg123",
    ),
    (
        "token eyJhbGciOi.eyJzdWIi.sig_-x and eyJa.b.c and eyJab.cd.",
        "token [REDACTED] and eyJa.b.c and [REDACTED]",
    ),
    ("eyJ-eyJ-eyJ-eyJ- sk-sk-sk-sk-sk- sk-eyJabc.de.fg", "eyJ-eyJ-eyJ-eyJ- sk-sk-sk-sk-sk- sk-[REDACTED]"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY----- after", "[REDACTED] after"),
    (
        "rk_live_abcdefgh12 sk_test_ABCDEFGH ghp_aaaaaaaaaaaaaaaaaaaa github_pat_bbbbbbbbbbbbbbbbbbbbbb",
        "[REDACTED] [REDACTED] [REDACTED] [REDACTED]",
    ),
    (
        "AKIAABCDEFGHIJKLMNOP ASIAABCDEFGHIJKLMNOPQ hf_cccccccccccccccccccccccccccccc xoxb-1234567890ab",
        "[REDACTED] ASIAABCDEFGHIJKLMNOPQ [REDACTED] [REDACTED]",
    ),
    ("AIzaddddddddddddddddddddddddddddddddddd glpat-eeeeeeeeeeeeeeeeeeee", "[REDACTED] [REDACTED]"),
    (
        "postgres://user:p@ss/w?rd@db.internal:5432/app and redis://h:6379/0",
        "postgres://user:[REDACTED]@db.internal:5432/app and redis://h:6379/0",
    ),
    ("a://b:c@ a://@ a://b:1/ https://user@host/x", "a://b:[REDACTED]@ a://@ a://b:1/ https://user@host/x"),
    (
        "password=hunter2 pw: secret; 'api_key': 'abc', \"secret\": \"x y\" api key: k",
        "password=[REDACTED] pw: [REDACTED]; 'api_key': '[REDACTED]', "
        '"secret": "[REDACTED]" api key: [REDACTED]',
    ),
    (
        "?token=abc&other=1 Authorization: Token tok123 session_id=zzz",
        "?token=[REDACTED]&other=1 Authorization: Token [REDACTED] session_id=[REDACTED]",
    ),
    (
        "num_tokens=5 tokenizer=bpe pad_token=0 forward_pass=2 author=me",
        "num_tokens=5 tokenizer=bpe pad_token=0 forward_pass=2 author=me",
    ),
    (
        "sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-abc",
        "sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-abc",
    ),
    (
        "eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJab.cd.ef",
        "[REDACTED]",
    ),
    (
        "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.://x:y@z",
        "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.://x:[REDACTED]@z",
    ),
    ("pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=pw=", "pw=[REDACTED]"),
    (
        "api key api key api key api key api key api key api key api key api key api key : v",
        "api key api key api key api key api key api key api key api key api key api key : [REDACTED]",
    ),
]


class TestSameOutput:
    @pytest.mark.parametrize(("text", "expected"), KNOWN, ids=range(len(KNOWN)))
    def test_known_text_is_redacted_as_before(self, text: str, expected: str) -> None:
        """Ordinary text, every credential form and short adversarial text: the output is unchanged."""
        assert redact_text(text) == expected

    def test_ordinary_text_is_returned_itself(self) -> None:
        """Nothing to replace: the same object comes back (callers test identity)."""
        text = 'File "/home/u/train.py", line 12, in main\n' * 100
        assert redact_text(text) is text


ADVERSARIAL = ("sk-", "eyJ-", "sk-a.", "eyJa.", "a://b:", "a.", "api key ")
"""Units that start a credential and never complete one (no digit, no dots, no ``@``, no ``=``)."""


class TestQuotedValues:
    def test_a_secret_quoted_after_a_plain_key_is_found(self) -> None:
        """KeyError: 'password=...': the quoted value of a key that is not secret is looked into
        (it hid the secret before: the match of the plain key swallowed it)."""
        assert redact_text("KeyError: 'password=hunter2'") == "KeyError: 'password=[REDACTED]'"
        assert redact_text("TokenError: \"api_key: 'abc'\"") == "TokenError: \"api_key: '[REDACTED]'\""

    @pytest.mark.parametrize(
        "literal",
        ["{'password': b'hunter2'}", "password=b'hunter2'", "secret_key = r'hunter2'", "api_key=u'hunter2'",
         'token=rb"hunter2"', "password=B'hunter2'", "\"password\": f'hunter2'"],
    )  # fmt: skip
    def test_python_literals_with_a_prefix(self, literal: str) -> None:
        """b'...', r'...', u'...', rb"...": the quoted value is hidden, not only the prefix letter."""
        out = redact_text(literal)
        assert "hunter2" not in out
        assert "[REDACTED]" in out


class TestAdversarialText:
    @pytest.mark.parametrize("unit", ADVERSARIAL)
    def test_repeated_prefix_holds_no_credential(self, unit: str) -> None:
        """A repeated prefix that never completes a credential comes back unchanged."""
        text = unit * (100_000 // len(unit))
        assert redact_text(text) is text

    def test_a_key_after_a_long_run_of_prefixes(self) -> None:
        """sk-sk-...sk-abc1defgh: the run is one key (from the first sk-), redacted whole."""
        assert redact_text("x " + "sk-" * 30_000 + "abc1defgh end") == f"x {REDACTED} end"

    def test_a_jwt_after_a_long_run_of_prefixes(self) -> None:
        """eyJ-eyJ-...eyJab.cd.ef: one JWT from the first eyJ."""
        assert redact_text("x " + "eyJ-" * 30_000 + "eyJab.cd.ef end") == f"x {REDACTED} end"

    def test_a_jwt_inside_a_failed_key(self) -> None:
        """sk-eyJabc.de.fg: the sk- run has no digit, the JWT after its dash is still found."""
        assert redact_text("sk-" * 1000 + "eyJabc.de.fg") == "sk-" * 1000 + REDACTED

    def test_dense_credentials(self) -> None:
        """Every 9 characters a URL password, every 12 a key: each one redacted."""
        assert redact_text("a://b:c@ " * 10_000) == f"a://b:{REDACTED}@ " * 10_000
        assert redact_text("sk-abcdefg1 " * 10_000) == f"{REDACTED} " * 10_000

    def test_million_character_prefix_runs_finish(self) -> None:
        """sk-sk-... and eyJ-eyJ-... of a million characters: the quadratic code took about an hour
        each (38 s at 100,000); in a child process given 5 minutes, both finish, unchanged."""
        code = (
            "from speedtronic.processors.redact import redact_text\n"
            "for unit in ('sk-', 'eyJ-', 'sk-a.'):\n"
            f"    text = (unit * {MAX_REDACTED_CHARS})[:{MAX_REDACTED_CHARS}]\n"
            "    assert redact_text(text) is text, unit\n"
            "print('done')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=child_env()
        )
        assert result.stdout.strip() == "done", result.stderr[-2000:]


class TestCap:
    def test_a_longer_text_is_cut_with_its_start_redacted(self) -> None:
        """Past MAX_REDACTED_CHARS: a <truncated: ...> marker with the start, credentials hidden."""
        text = "password=hunter2-CANARY " + "x" * MAX_REDACTED_CHARS + " sk-abcdefg123 end"
        out = redact_text(text)
        assert out.startswith(f"<truncated: str of {len(text):,} chars; first ")
        assert "password=[REDACTED] xxxx" in out
        assert "CANARY" not in out
        assert "sk-abcdefg123" not in out
        assert len(out) <= MAX_REDACTED_CHARS + 100

    def test_a_secret_across_the_cut_is_not_kept_in_part(self) -> None:
        """A key that the cut would split is redacted whole or dropped: no part of it is kept."""
        for shift in range(0, 20, 3):
            text = "x " * ((MAX_REDACTED_CHARS - shift) // 2) + "sk-abcdefgh12345678 tail"
            assert "abcdefgh" not in redact_text(text)

    def test_at_the_cap_nothing_is_cut(self) -> None:
        """A text of exactly MAX_REDACTED_CHARS is redacted whole, not cut."""
        text = "y" * (MAX_REDACTED_CHARS - 12) + " password=hi"
        assert redact_text(text) == "y" * (MAX_REDACTED_CHARS - 12) + " password=[REDACTED]"
