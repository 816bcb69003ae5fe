"""Redact: secret keys by their words, credential-looking values anywhere, in every container shape."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import io
import types
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.contextvars
from structlog.testing import LogCapture

from speedtronic.processors import ConvertValues, Redact
from speedtronic.processors.redact import is_secret_key, redact_text
from speedtronic.profiling import MetricLogger
from tests.processors.keys import LookalikeKey
from tests.reliability.conftest import python

CANARY = "sk-CANARY123"
PLAIN = "hunter2-CANARY"

SECRET_KEYS = [
    "private-key", "privateKey", "accessKey", "access-key", "passphrase", "api_tokens", "github_token_2",
    "token_value", "token ", "db_pass", "pwd", "pw", "jwt", "ssh_key", "signing_key", "sessionid",
    "session_id", "sessionId", "AUTH", "bearer", "password", "Password", "passwd", "secret", "api_key",
    "apiKey", "APIKey", "X-API-KEY", "OPENAI_API_KEY", "aws_secret_access_key", "access_key_id",
    "hf_token", "token", "access_token", "authToken", "Authorization", "Cookie", "credentials",
    "client_secret", "csrf_token", "refresh-token",
    # words glued without a separator
    "PGPASSWORD", "userpassword", "REDISPASSWORD", "MYSQL_ROOTPASSWD", "userPassphrase", "passwordhash",
    "openaiapikey", "clientsecret", "AWSSECRETKEY", "hftoken", "GITHUBTOKEN", "apitokens",
    # two words that spell one
    "PassWord", "Pass_Word", "PassPhrase", "userPassWord",
]  # fmt: skip
VISIBLE_KEYS = [
    "tokens_per_s", "num_tokens", "max_tokens", "total_tokens", "tokens", "max_new_tokens",
    "prompt_tokens", "pad_token", "eos_token", "token_ids", "token_count", "tokenizer", "step", "loss",
    "lr", "passes", "num_passes", "pass@1", "pass_at_1", "forward_pass", "author", "authority", "key",
    "sort_key", "rng_key", "session", "keys", "secretary_count",
    # glued words that count text tokens or merely contain a secret word
    "maxtokens", "numtokens", "totaltokens", "maxnewtokens", "ntokens", "padtoken", "eostoken",
    "nexttoken", "subtokens", "tokenizers", "detokenized", "secretary", "secretion", "bypass", "compass",
    "passenger_count",
]  # fmt: skip


def redact(event_dict: dict[Any, Any], **options: Any) -> dict[Any, Any]:
    return dict(Redact(**options)(None, "info", {"event": "x", **event_dict}))


@dataclasses.dataclass
class DB:
    host: str
    url: str = dataclasses.field(repr=False, default="")
    password: str = ""


@dataclasses.dataclass
class Conn:
    host: str
    url: str = dataclasses.field(repr=False, default="")


Creds = collections.namedtuple("Creds", "user api_key")


class TestKeyWords:
    @pytest.mark.parametrize("key", SECRET_KEYS)
    def test_secret_keys(self, key: str) -> None:
        """A key whose words name a credential is secret, in any spelling."""
        assert is_secret_key(key)
        assert redact({key: "hunter2"})[key] == "[REDACTED]"

    @pytest.mark.parametrize("key", VISIBLE_KEYS)
    def test_counts_and_rates_stay_visible(self, key: str) -> None:
        """Token counts, passes and other metrics are not secrets."""
        assert not is_secret_key(key)
        assert redact({key: 5})[key] == 5

    def test_non_string_and_str_subclass_keys(self) -> None:
        """A key is judged by its text too: ``("api_key",)`` and a str enum printed as ``Col.PASSWORD``."""
        import enum

        class Col(str, enum.Enum):
            PASSWORD = "x"

        event: dict[Any, Any] = {"event": "x", ("api_key",): "hunter2", Col.PASSWORD: "hunter2"}
        out: Any = Redact()(None, "info", event)
        assert out[("api_key",)] == out[Col.PASSWORD] == "[REDACTED]"

    def test_a_str_enum_key_is_judged_through_emit(self, tmp_path: Path) -> None:
        """A ``str`` enum key whose value is secret is hidden at the top level of ``emit`` (written as
        its value, as JSON libraries write it) and nested, in the text log and the JSONL record."""
        import enum

        class Field(str, enum.Enum):
            DB = "db_password"

        logger = MetricLogger(file=tmp_path / "m.log", json_file=tmp_path / "m.jsonl")
        logger.emit("train_start", {Field.DB: PLAIN, "nested": {Field.DB: PLAIN}})
        logger.close()
        for name in ("m.log", "m.jsonl"):
            text = (tmp_path / name).read_text()
            assert PLAIN not in text, text
            assert "db_password" in text, text

    def test_a_command_line_option_hides_its_value(self) -> None:
        """In an argument list, the item after a secret option (``--password X``) is hidden; other
        options keep their values."""
        argv = ["train.py", "--password", PLAIN, "--lr", "0.1", "--hf-token", PLAIN, "-v"]
        assert redact({"argv": argv})["argv"] == [
            "train.py", "--password", "[REDACTED]", "--lr", "0.1", "--hf-token", "[REDACTED]", "-v",
        ]  # fmt: skip
        assert redact({"argv": ("--password", PLAIN)})["argv"] == ("--password", "[REDACTED]")

    def test_an_exception_whose_args_hold_a_secret(self) -> None:
        """An exception's ``args`` are judged like a tuple: ``ValueError("password", X)`` becomes its
        text with X hidden; one holding no secret is passed on as itself."""
        out = redact({"error": ValueError("password", PLAIN), "other": KeyError("step")})
        assert out["error"] == "ValueError: ('password', '[REDACTED]')"
        assert isinstance(out["other"], KeyError)

    def test_user_patterns_add_to_the_words(self) -> None:
        """``patterns=[...]`` (fnmatch, case-insensitive) hides more keys; the word rule still applies."""
        out = redact({"user_SSN": "1", "api_key": "2", "loss": 3}, patterns=["*ssn*"])
        assert out == {"event": "x", "user_SSN": "[REDACTED]", "api_key": "[REDACTED]", "loss": 3}

    def test_words_off_leaves_only_the_patterns(self) -> None:
        """``words=False``: only the given patterns hide keys."""
        out = redact({"user_ssn": "1", "api_key": "2"}, patterns=["*ssn*"], words=False, values=False)
        assert out == {"event": "x", "user_ssn": "[REDACTED]", "api_key": "2"}

    def test_one_string_is_refused(self) -> None:
        """``patterns="*key*"`` is a TypeError naming the fix."""
        with pytest.raises(TypeError, match="list of patterns"):
            Redact("*key*")

    def test_a_reused_redactor_still_catches_what_it_has_not_seen(self) -> None:
        """After many plain events, a new secret key, a secret nested in a known key and a key first
        seen nested are each still redacted (the key judge's cache can't be poisoned)."""
        stage = Redact()

        def redacted(**fields: Any) -> dict[Any, Any]:
            return dict(stage(None, "info", {"event": "train_step", **fields}))

        for step in range(3):
            assert redacted(step=step, loss=0.5)["loss"] == 0.5
        assert redacted(step=3, hf_token="t")["hf_token"] == "[REDACTED]"
        assert redacted(step=4, loss={"password": "p"})["loss"] == {"password": "[REDACTED]"}
        redacted(outer={"db_password": "nested"})
        assert redacted(db_password="p")["db_password"] == "[REDACTED]"

    def test_the_event_is_kept(self) -> None:
        """The top-level ``"event"`` is never redacted."""
        assert Redact()(None, "info", {"event": "token"})["event"] == "token"

    def test_custom_replacement(self) -> None:
        """``replacement`` is what a hidden value and a credential in text become."""
        out = redact({"password": "p", "note": f"key {CANARY}", "cmd": "PGPASSWORD=p psql"}, replacement="*")
        assert (out["password"], out["note"], out["cmd"]) == ("*", "key *", "PGPASSWORD=* psql")


class TestValues:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            (f"Bearer {CANARY}", "Bearer [REDACTED]"),
            ("authorization: bearer eyJhbGci.x-1", "authorization: bearer [REDACTED]"),
            ("Basic dXNlcjpwYXNz", "Basic [REDACTED]"),  # base64 of user:pass
            (f"key={CANARY}.", "key=[REDACTED]."),
            ("sk-proj-Ab3dEf6hIj9kLmNoPq", "[REDACTED]"),
            ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "[REDACTED]"),
            ("ghp_" + "a1B2" * 9, "[REDACTED]"),
            ("github_pat_11ABCDEFG0123456789_abcdefXYZ", "[REDACTED]"),
            ("id AKIAIOSFODNN7EXAMPLE here", "id [REDACTED] here"),
            ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "[REDACTED]"),
            ("hf_" + "abcdefghij" * 3 + "AB", "[REDACTED]"),
            ("xoxb-123456789012-abcdef", "[REDACTED]"),
            (f"postgres://u:{CANARY}@h/db", "postgres://u:[REDACTED]@h/db"),
            ("redis://:p@ss@cache:6379/0", "redis://:[REDACTED]@cache:6379/0"),
            ("postgres://user:pa/ss?@host/db", "postgres://user:[REDACTED]@host/db"),
            ("redis://:p/w?x#y@cache:6379/0", "redis://:[REDACTED]@cache:6379/0"),
            ("see postgres://me@corp.com:hunter2@host/db", "see postgres://me@corp.com:[REDACTED]@host/db"),
            ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "[REDACTED]"),
        ],
    )
    def test_credentials_are_replaced(self, text: str, expected: str) -> None:
        """Well-known credential shapes are replaced in free text, keeping what is around them."""
        assert redact_text(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "https://example.com:8080/path",
            "Basic training",
            "bearer of bad news",
            "sk-learn-tutorial",
            "task-12345678",
            "loss went up",
            "user@example.com",
            "https://example.com:8080/path?email=me@example.com",
            "http://localhost:8888/lab@main",
            "ssh://git@github.com:org/repo.git",
            "step: 5, loss: 0.25, lr=3e-4",
            "tokens: 512 max_tokens=1024 tokens_per_s=33.5 num_tokens: 9",
            "passes: 3, monkey=1, key: value, sort_key=name",
            "at 2026-12-04T15:14:16Z",
        ],
    )
    def test_ordinary_text_is_kept(self, text: str) -> None:
        """Text that merely resembles a credential is returned as the same object."""
        assert redact_text(text) is text

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("password=hunter2secret", "password=[REDACTED]"),
            ("login: password: hunter2secret", "login: password: [REDACTED]"),
            ("api_key=sk-abcdefgh rest", "api_key=[REDACTED] rest"),
            ("GET /file?token=abcdef123&x=1", "GET /file?token=[REDACTED]&x=1"),
            ("PGPASSWORD=pg1 psql", "PGPASSWORD=[REDACTED] psql"),
            ("--hf-token=abc --steps=2", "--hf-token=[REDACTED] --steps=2"),
            ("refused {'user': 'me', 'password': 'a b'}", "refused {'user': 'me', 'password': '[REDACTED]'}"),
            ('{"db_password":"x1","host":"h"}', '{"db_password":"[REDACTED]","host":"h"}'),
            ("Config(lr=0.1, wandb_api_key='plain')", "Config(lr=0.1, wandb_api_key='[REDACTED]')"),
            ('OPENAI_API_KEY = "a b"', 'OPENAI_API_KEY = "[REDACTED]"'),
            ("Authorization: Token abc123", "Authorization: Token [REDACTED]"),
            ("secret='it\\'s'", "secret='[REDACTED]'"),
            ("monkey=sk-proj-Ab3dEf6hIj9kLmNoPq", "monkey=[REDACTED]"),
            ("api key: hunter2", "api key: [REDACTED]"),
            ("the new api key: hunter2 ok", "the new api key: [REDACTED] ok"),
            ("HF token = hunter2", "HF token = [REDACTED]"),
            ("PassWord=hunter2", "PassWord=[REDACTED]"),
        ],
    )
    def test_secret_keys_inside_free_text(self, text: str, expected: str) -> None:
        """``key=value`` and ``key: value`` text (quoted or not, in a query string, a repr, JSON) whose
        key is secret by the word rule has its value replaced; other keys' values are kept."""
        assert redact_text(text) == expected

    def test_a_long_url_password(self) -> None:
        """A URL password of any length is hidden; one with a raw ``/`` up to 256 characters."""
        assert redact_text("redis://u:" + "p" * 3000 + "@h/0") == "redis://u:[REDACTED]@h/0"
        assert redact_text("redis://u:" + "p/" * 128 + "@h/0") == "redis://u:[REDACTED]@h/0"

    def test_many_url_starts_without_an_at_finish(self) -> None:
        """800,000 characters of ``a://b:c/`` (each a URL start, no ``@``) take linear time (20 s bound,
        where looking for the last ``@`` from each start took minutes)."""
        result = python(
            """
            from speedtronic.processors import redact_text
            text = "a://b:c/" * 100_000
            print(redact_text(text) is text)
            """,
            timeout=20,
        )
        assert result.stdout.strip() == "True", result.stderr

    def test_dotted_words_take_linear_time(self) -> None:
        """600,000 characters of ``a.a.a.`` (each letter a possible URL scheme's start) take linear
        time (20 s bound, where each start scanning to the end took minutes)."""
        result = python(
            """
            from speedtronic.processors import redact_text
            text = "a." * 300_000
            print(redact_text(text) is text)
            """,
            timeout=20,
        )
        assert result.stdout.strip() == "True", result.stderr

    def test_under_any_key_and_at_any_depth(self) -> None:
        """Credential-looking values are replaced under innocent keys and inside containers."""
        out = redact({"note": f"used {CANARY}", "cfg": {"urls": [f"postgres://u:{CANARY}@h/db"]}})
        assert out["note"] == "used [REDACTED]"
        assert out["cfg"] == {"urls": ["postgres://u:[REDACTED]@h/db"]}

    def test_a_key_that_is_a_credential(self) -> None:
        """A key that looks like a credential is replaced; order and values are kept."""
        out = redact({"a": 1, CANARY: 2, "nested": {CANARY: 3}})
        assert out == {"event": "x", "a": 1, "[REDACTED]": 2, "nested": {"[REDACTED]": 3}}

    def test_values_off(self) -> None:
        """``values=False`` leaves values under innocent keys as they are; secret keys are still hidden."""
        out = redact({"note": f"used {CANARY}", "api_key": "k"}, values=False)
        assert out == {"event": "x", "note": f"used {CANARY}", "api_key": "[REDACTED]"}


class TestContainers:
    def test_dataclass_never_shows_more_than_its_repr(self) -> None:
        """A dataclass holding a secret becomes a dict of the fields its repr shows: no repr=False url."""
        db = DB("h", url=f"postgres://u:{CANARY}@h/db", password=CANARY)
        assert redact({"db": db}, values=False)["db"] == {"host": "h", "password": "[REDACTED]"}

    def test_dataclass_without_secrets_is_passed_on(self) -> None:
        """A dataclass whose shown fields hold no secret is the same object (its repr hides ``url``)."""
        conn = Conn("h", url=f"postgres://u:{CANARY}@h/db")
        out = redact({"conn": conn})
        assert out["conn"] is conn
        assert CANARY not in str(out)

    def test_dataclass_with_its_own_repr_is_judged_by_its_text(self) -> None:
        """A dataclass with a hand-written ``__str__`` is not expanded into fields it doesn't print: it
        is passed on, or, when its repr shows a secret, becomes that repr redacted."""

        @dataclasses.dataclass
        class Own:
            host: str
            password: str

            def __str__(self) -> str:
                return f"Own<{self.host}>"

        own = Own("h", "")
        assert redact({"o": own})["o"] is own
        out = redact({"o": Own("h", "hunter2")})["o"]
        assert type(out) is not dict
        assert out.endswith("Own(host='h', password='[REDACTED]')")

    def test_namespaces(self) -> None:
        """argparse and SimpleNamespace objects become dicts of their attributes when they hold secrets."""
        out = redact(
            {
                "args": argparse.Namespace(seed=1, github_token=CANARY),
                "ns": types.SimpleNamespace(aws_secret_access_key=CANARY),
            }
        )
        assert out["args"] == {"seed": 1, "github_token": "[REDACTED]"}
        assert out["ns"] == {"aws_secret_access_key": "[REDACTED]"}

    def test_namedtuple_keeps_its_type(self) -> None:
        """A named tuple's field names are keys; it stays a named tuple."""
        out = redact({"c": Creds("me", "hunter2")})
        assert out["c"] == Creds("me", "[REDACTED]")
        assert type(out["c"]) is Creds

    def test_header_pairs(self) -> None:
        """A (name, value) pair, tuple or two-item list, whose name is a secret key hides its value."""
        headers = [("Authorization", "Token abc"), ["api_key", "hunter2"], ("Accept", "json")]
        assert redact({"headers": headers})["headers"] == [
            ("Authorization", "[REDACTED]"),
            ["api_key", "[REDACTED]"],
            ("Accept", "json"),
        ]

    @pytest.mark.parametrize(
        "make",
        [
            collections.deque,
            collections.UserList,
            set,
            frozenset,
            lambda items: dict(enumerate(items)).values(),
            lambda items: dict.fromkeys(items).keys(),
        ],
        ids=["deque", "UserList", "set", "frozenset", "values_view", "keys_view"],
    )
    def test_other_collections_become_lists(self, make: Any) -> None:
        """deque, UserList, sets and dict views holding a secret are copied as plain lists."""
        out = redact({"c": make([CANARY, "ok"])})["c"]
        assert sorted(out) == ["[REDACTED]", "ok"]
        assert type(out) is list

    def test_dict_items(self) -> None:
        """``dict.items()``: each (key, value) is a pair, so a secret key hides its value."""
        out = redact({"i": {"password": "hunter2", "lr": 0.1}.items()})
        assert out["i"] == [("password", "[REDACTED]"), ("lr", 0.1)]

    def test_numpy_object_and_text_arrays(self) -> None:
        """Object and text arrays are converted and scrubbed; numeric arrays are left for ConvertValues."""
        import numpy as np

        numbers = np.arange(3)
        out = redact(
            {"o": np.array([{"secret": "s"}, 1], dtype=object), "t": np.array([CANARY, "x"]), "n": numbers}
        )
        assert out["o"] == [{"secret": "[REDACTED]"}, 1]
        assert out["t"] == ["[REDACTED]", "x"]
        assert out["n"] is numbers

    def test_objects_are_judged_by_their_text(self) -> None:
        """An exception, bytes or any object printing a credential becomes its redacted text."""
        out = redact({"e": ValueError(f"bad {CANARY}"), "b": CANARY.encode(), "ok": ValueError("fine")})
        assert (out["e"], out["b"]) == ("bad [REDACTED]", "b'[REDACTED]'")
        assert isinstance(out["ok"], ValueError)

    def test_caller_objects_untouched_and_clean_ones_shared(self) -> None:
        """Copies are made only where a secret is; the caller's objects are never changed."""
        clean = {"a": [1, 2, {"b": 3}]}
        dirty: dict[str, Any] = {"db": {"password": CANARY}, "hosts": ["h"]}
        out = redact({"clean": clean, "dirty": dirty})
        assert out["clean"] is clean
        assert out["dirty"]["hosts"] is dirty["hosts"]
        assert dirty["db"]["password"] == CANARY

    def test_secrets_cannot_hide_below_the_depth_limit(self) -> None:
        """Nesting deeper than 32 levels is cut, so a secret at level 100 is not passed on."""
        deep: Any = {"password": CANARY}
        for _ in range(100):
            deep = [deep]
        assert CANARY not in repr(redact({"deep": deep}, values=False))


class TestWalks:
    def test_a_cycle_becomes_a_marker(self) -> None:
        """A container met inside itself is ``"<cycle>"``; the caller's object keeps its cycle."""
        loop: dict[str, Any] = {"password": CANARY}
        loop["self"] = loop
        out = redact({"loop": loop})
        assert out["loop"] == {"password": "[REDACTED]", "self": "<cycle>"}
        assert loop["self"] is loop

    def test_a_shared_container_is_redacted_once(self) -> None:
        """The same secret-holding dict under two keys becomes one redacted copy, used twice."""
        shared = {"token": CANARY}
        out = redact({"a": shared, "b": [shared]})
        assert out["a"] == {"token": "[REDACTED]"}
        assert out["b"][0] is out["a"]

    def test_shared_and_circular_payloads_finish(self) -> None:
        """Shared sub-objects and cycles that once took exponential time finish (20 s bound)."""
        result = python(
            """
            from speedtronic.processors import ConvertValues, Redact
            root = {"children": []}
            root["children"] += [{"parent": root, "password": "p"}] * 4
            a = []
            a.extend([a, a])
            x = ["sk-CANARY123"]
            for _ in range(30):
                x = [x, x]
            event = {"event": "e", "root": root, "a": a, "x": x}
            for stage in (Redact(), ConvertValues(), Redact()):
                event = stage(None, "info", event)
            print("ok")
            """,
            timeout=20,
        )
        assert result.stdout.strip() == "ok", result.stderr


class TestKeySets:
    def test_a_lookalike_of_a_judged_key_set_is_judged_itself(self) -> None:
        """After the key set ``event, loss`` was judged, a key equal to ``"loss"`` printing as
        ``password``, and a ``str`` subclass spelling ``loss`` whose text is secret, are still hidden."""
        stage = Redact()

        class Sneaky(str):
            def __str__(self) -> str:
                return "api_key"

        for _ in range(3):
            assert stage(None, "info", {"event": "x", "loss": 0.5})["loss"] == 0.5
        for key in (LookalikeKey("password"), Sneaky("loss")):
            assert list(stage(None, "info", {"event": "x", key: PLAIN}).values()) == ["x", "[REDACTED]"]

    def test_keys_built_afresh_each_event(self) -> None:
        """Keys built with an f-string every event are judged like the same key objects: secrets
        hidden, text scanned, order and the dict itself kept."""
        stage = Redact()
        for _ in range(3):
            event = {"event": "x", **{f"layer_{i}": i / 3 for i in range(50)}, f"db_{'pass'}": PLAIN,
                     f"{'note'}": f"used {CANARY}"}  # fmt: skip
            out = stage(None, "info", event)
            assert out is event
            assert list(out)[-2:] == ["db_pass", "note"]
            assert (out["db_pass"], out["note"], out["layer_3"]) == ("[REDACTED]", "used [REDACTED]", 1.0)

    def test_a_value_turning_to_text_in_a_judged_key_set(self) -> None:
        """A key set met with numbers only, then with a credential (as text, in a dict, in a list)
        under one of its keys, then numbers again, has that credential hidden each time it comes."""
        stage = Redact()
        numbers = {"event": "x", **{f"m{i}": i / 3 for i in range(20)}}
        assert stage(None, "info", dict(numbers)) == numbers
        for value in (f"used {CANARY}", {"nested": CANARY}, [CANARY]):
            for _ in range(2):
                out = stage(None, "info", {**numbers, "m7": value})
                assert CANARY not in str(out["m7"])
                assert out["m3"] == 1.0
            assert stage(None, "info", dict(numbers)) == numbers

    def test_equal_keys_of_other_objects_are_not_renamed(self) -> None:
        """A key equal to one judged before but built afresh (another object) is not taken for a
        renamed key: a nested mapping holding no secret is passed on as itself, and a top-level key set
        first met after its keys were judged elsewhere keeps its keys and values."""
        stage = Redact()
        stage(None, "info", {"event": "x", "lr": 0.1, "cfg": {"lr": 0.1}})
        nested = {"".join(["l", "r"]): 0.2}
        assert stage(None, "info", {"event": "x", "cfg": nested})["cfg"] is nested
        fresh = {"event": "x", "".join(["l", "r"]): 0.3, "step": 1}
        assert stage(None, "info", fresh) == {"event": "x", "lr": 0.3, "step": 1}

    def test_many_key_sets_still_judged(self) -> None:
        """After a thousand distinct key sets, a new and an early one are judged correctly."""
        stage = Redact()
        for i in range(1000):
            stage(None, "info", {"event": "x", f"k{i}": 1, "password": PLAIN})
        assert stage(None, "info", {"event": "x", "k0": 1, "password": PLAIN})["password"] == "[REDACTED]"
        assert stage(None, "info", {"event": "x", "new": 1, "hf_token": PLAIN})["hf_token"] == "[REDACTED]"


class TestInAStockChain:
    @pytest.mark.parametrize("convert_first", [False, True], ids=["redact_first", "convert_first"])
    def test_bound_context_and_contextvars(self, convert_first: bool) -> None:
        """In a plain structlog chain, bound and contextvar fields are redacted like the event's own."""
        capture = LogCapture()
        stages: list[Any] = [Redact(), ConvertValues()]
        if convert_first:
            stages.reverse()
        logger = structlog.wrap_logger(
            None,
            processors=[
                structlog.contextvars.merge_contextvars,
                *stages,
                structlog.processors.add_log_level,
                capture,
            ],
        ).bind(api_key="bound-secret", run="r1")
        structlog.contextvars.bind_contextvars(hf_token="ctx-secret")
        try:
            logger.info("login", headers=[("Authorization", "Token abc")], note=f"k={CANARY}", tokens=5)
        finally:
            structlog.contextvars.clear_contextvars()
        (entry,) = capture.entries
        assert entry["api_key"] == entry["hf_token"] == "[REDACTED]"
        assert entry["note"] == "k=[REDACTED]"
        assert list(entry["headers"][0]) == ["Authorization", "[REDACTED]"]
        assert (entry["run"], entry["tokens"], entry["event"]) == ("r1", 5, "login")
        assert entry["log_level"] == "info"


class CountingDict(dict):  # type: ignore[type-arg]  # any keys, as a payload's
    """A dict that counts membership checks: the work of finding free names."""

    checks = 0

    def __contains__(self, key: object) -> bool:
        CountingDict.checks += 1
        return super().__contains__(key)


class TestRenamingIsLinear:
    def test_names_colliding_on_one_base_cost_linear_checks(self) -> None:
        """10,000 names that all want "[REDACTED]" are renamed with O(n) lookups, not O(n**2)."""
        from speedtronic.record import free_name

        taken, counters = CountingDict(), {}
        CountingDict.checks = 0
        for _ in range(10_000):
            taken[free_name(taken, "[REDACTED]", counters)] = None
        assert len(taken) == 10_000
        assert CountingDict.checks <= 3 * 10_000

    def test_many_credential_keys_are_all_kept_apart(self, tmp_path: Path) -> None:
        """16,000 keys that are themselves credentials: every value kept, under distinct names."""
        import orjson

        path = tmp_path / "m.jsonl"
        keys = {f"ghp_{'a' * 36}{i:06d}": i for i in range(16_000)}
        with MetricLogger(stream=io.StringIO(), json_file=path, max_line_bytes=None) as logger:
            logger.emit("x", keys)
        record = orjson.loads(path.read_bytes())
        names = [name for name in record if name.startswith("[REDACTED]")]
        assert len(names) == len(set(names)) == 16_000
        assert sorted(record[name] for name in names) == list(range(16_000))
