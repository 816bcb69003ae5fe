"""WebhookHook against a real HTTP server on 127.0.0.1 (``http.server`` in a thread): one that answers
200, one that never answers, one that answers 500, one that drops the connection."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from speedtronic.distributed import RankInfo
from speedtronic.hooks import build_hook
from speedtronic.integrations.webhook import WebhookHook, alert_text
from speedtronic.profiling import MetricLogger
from tests.helpers import WEBHOOK_TOKEN, WebhookHandler, WebhookReceiver, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
TOKEN = WEBHOOK_TOKEN
"""The secret part of the webhook URL's path, as in a Slack incoming webhook's URL."""


def alert(**fields: Any) -> dict[str, Any]:
    """An ``alert`` payload as the alerts stage emits it (the shared contract)."""
    return {
        "rule": "spike",
        "severity": "warning",
        "key": "loss",
        "step": 120,
        "value": 9.5,
        "threshold": 4.25,
        "message": "loss 9.5 at step 120 is above mean + 6 sigma (4.25)",
        "window": 128,
        "mean": 2.5,
        "std": 0.29,
        **fields,
    }


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start receivers with the given modes; each is shut down after the test."""
    started: list[WebhookReceiver] = []

    def start(*modes: str) -> WebhookReceiver:
        started.append(WebhookReceiver.start(*modes))
        return started[-1]

    yield start
    for server in started:
        server.stop()


LOADED = {"timeout_s": 60, "close_timeout_s": 120}
"""Bounds a loaded machine never reaches: a post's answer (the 5 s default would make a slow answer a
retry, a second request) and close or flush."""


def webhook(url: str, **options: Any) -> WebhookHook:
    """A hook bounded by ``LOADED`` (a loaded machine is slow, never that slow), unless the test
    bounds it itself."""
    return WebhookHook(url, **{**LOADED, **options})


def logger(tmp_path: Path, hook: WebhookHook, rank: RankInfo | None = None) -> MetricLogger:
    """A real logger writing ``metrics.jsonl`` (as rank ``rank`` of a job, when given)."""
    return MetricLogger(
        stream=io.StringIO(), json_file=tmp_path / "metrics.jsonl", hooks=[hook], rank=rank, lead_rank=None
    )


class TestDelivered:
    def test_an_alert_is_posted_as_json_with_a_slack_text(self, serve: Any, tmp_path: Path) -> None:
        """The body is {text, record}: text is the one line Slack shows, record the alert's fields."""
        server = serve("ok")
        hook = webhook(server.url, name="run-42")
        with logger(tmp_path, hook, RankInfo(rank=1, world_size=2)) as log:
            log.emit("train_step", {"step": 120, "loss": 9.5})
            log.emit("alert", alert())
            log.emit("train_step", {"step": 121, "loss": 2.5})
        assert log.hook_errors == {}
        assert (hook.sent, hook.failed, hook.dropped) == (1, 0, 0)
        [request] = server.requests
        body = request["body"]
        assert (
            body["text"]
            == "[run-42] WARNING spike (rank 1): loss 9.5 at step 120 is above mean + 6 sigma (4.25)"
        )
        record = body["record"]
        assert {key: record[key] for key in alert()} == alert()
        assert (record["rank"], record["world_size"]) == (1, 2)
        assert record["event"] == "alert"
        assert "timestamp" in record
        assert "elapsed_s" in record

    def test_the_request_is_a_json_post_to_the_url_with_your_headers(self, serve: Any) -> None:
        """POST to the URL's path, Content-Type application/json, a speedtronic User-Agent, extra headers."""
        server = serve("ok")
        hook = webhook(server.url, headers={"Authorization": "Bearer abc.def"})
        hook.on_event("alert", alert())
        hook.close()
        [request] = server.requests
        assert request["path"] == f"/services/{TOKEN}"
        headers = {key.lower(): value for key, value in request["headers"].items()}
        assert headers["content-type"] == "application/json"
        assert headers["user-agent"].startswith("speedtronic/")
        assert headers["authorization"] == "Bearer abc.def"

    def test_secrets_in_any_field_are_redacted_as_in_the_logs(self, serve: Any, tmp_path: Path) -> None:
        """A password in the message, an API key in a field: [REDACTED] in text and record alike."""
        server = serve("ok")
        hook = webhook(server.url)
        secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
        with logger(tmp_path, hook) as log:
            log.emit(
                "alert", alert(message="loss spiked; password=hunter2", api_key=secret, note=f"key {secret}")
            )
        sent = json.dumps(server.requests[0]["body"])
        assert "hunter2" not in sent
        assert secret not in sent
        assert server.requests[0]["body"]["text"].endswith("password=[REDACTED]")
        assert server.requests[0]["body"]["record"]["api_key"] == "[REDACTED]"
        assert "hunter2" not in (tmp_path / "metrics.jsonl").read_text()  # as the logs hide it

    def test_only_the_events_asked_for_are_posted(self, serve: Any) -> None:
        """Alerts by default; events= names others (a train_end), and everything else stays home."""
        server = serve("ok")
        hook = webhook(server.url, events=["alert", "train_end"])
        hook.on_event("train_step", {"step": 1, "loss": 0.5})
        hook.on_event("alert", alert())
        hook.on_event("train_end", {"step": 2, "status": "completed", "final_loss": 0.25, "elapsed_s": 9.5})
        hook.close()
        texts = [request["body"]["text"] for request in server.requests]
        assert texts[1] == "train_end: step=2 status=completed final_loss=0.25"
        assert [request["body"]["record"]["event"] for request in server.requests] == ["alert", "train_end"]

    def test_slack_control_characters_are_escaped_in_text_only(self, serve: Any) -> None:
        """<, > and & are &lt; &gt; &amp; in text (Slack's rule); the record keeps them as they are."""
        server = serve("ok")
        hook = webhook(server.url)
        hook.on_event("alert", alert(message="rate < 0.5 x median & falling"))
        hook.close()
        body = server.requests[0]["body"]
        assert body["text"].endswith("rate &lt; 0.5 x median &amp; falling")
        assert body["record"]["message"] == "rate < 0.5 x median & falling"

    def test_a_non_finite_value_is_null_in_strict_json(self, serve: Any) -> None:
        """A NaN alert value arrives as null (the JSONL record's rule), so any JSON parser reads it."""
        server = serve("ok")
        hook = webhook(server.url)
        hook.on_event("alert", alert(rule="non_finite", severity="error", value=float("nan")))
        hook.close()
        assert server.requests[0]["body"]["record"]["value"] is None
        assert server.requests[0]["body"]["text"].startswith("ERROR non_finite: ")

    def test_a_dropped_connection_is_tried_again(self, serve: Any) -> None:
        """The receiver closes the connection once; the second try is delivered, nothing failed."""
        server = serve("drop", "ok")
        hook = webhook(server.url, backoff_s=0.01)
        hook.on_event("alert", alert())
        hook.close()
        assert [request["mode"] for request in server.requests] == ["drop", "ok"]
        assert (hook.sent, hook.failed) == (1, 0)


class TestFailures:
    def test_a_server_that_never_answers_does_not_hold_up_emit(self, serve: Any, tmp_path: Path) -> None:
        """emit returns while the receiver holds the request; close gives up at its bound; counted."""
        server = serve("hang")
        hook = webhook(server.url, timeout_s=600, close_timeout_s=0.2)
        log = logger(tmp_path, hook)
        log.emit("alert", alert())
        assert server.received.wait(60)  # the worker posted it: emit had returned without an answer
        for step in range(3):
            log.emit("train_step", {"step": step, "loss": 0.5})
        with pytest.warns(UserWarning, match="close\\(\\) ran out of time"):
            log.close()
        assert not server.release.is_set()  # close returned while the receiver still held the request
        assert (hook.sent, hook.failed) == (0, 1)
        assert log.hook_errors == {"WebhookHook": 1}
        failure = next(r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "hook_error")
        assert failure["phase"] == "close"
        assert "WebhookHook(http://127.0.0.1:" in failure["error"]

    def test_a_500_is_retried_then_counted(self, serve: Any, tmp_path: Path) -> None:
        """retries=2: three posts, then one failure the logger counts, raised at the next event."""
        server = serve("500")
        hook = webhook(server.url, retries=2, backoff_s=0.01)
        log = logger(tmp_path, hook)
        log.emit("alert", alert())
        with pytest.warns(
            UserWarning, match="3 tries failed, the last: urllib.error.HTTPError: HTTP Error 500"
        ):
            log.flush()  # waits for the worker to give up, then counts what it raises
        assert len(server.requests) == 3
        log.emit("train_step", {"step": 121, "loss": 2.5})
        log.close()
        assert (hook.sent, hook.failed) == (0, 1)
        assert log.hook_errors == {"WebhookHook": 1}

    @pytest.mark.parametrize(("status", "reason"), [(404, "Not Found"), (302, "Found")])
    def test_a_refusal_is_not_retried(self, serve: Any, status: int, reason: str) -> None:
        """A 4xx other than 408/429, or a redirect (never followed as a GET without the body): one
        post, then the failure."""

        class Refuse(WebhookHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.server.requests.append({})
                self.send_response(status)
                self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

        server = serve("ok")
        server.RequestHandlerClass = Refuse
        hook = webhook(server.url, backoff_s=0.01)
        hook.on_event("alert", alert())
        with pytest.raises(RuntimeError, match=f"HTTP {status} {reason}: refused, not retried"):
            hook.close()
        assert len(server.requests) == 1

    def test_a_connection_closed_every_time_is_counted(self, serve: Any, tmp_path: Path) -> None:
        """Every try dropped: retries+1 posts, one failure counted, training went on."""
        server = serve("drop")
        hook = webhook(server.url, retries=1, backoff_s=0.01)
        with logger(tmp_path, hook) as log, pytest.warns(UserWarning, match="2 tries failed"):
            log.emit("alert", alert())
            log.flush()
            log.emit("train_step", {"step": 121, "loss": 2.5})
        assert len(server.requests) == 2
        assert log.hook_errors == {"WebhookHook": 1}
        assert [r["event"] for r in read_jsonl(tmp_path / "metrics.jsonl")].count("train_step") == 1

    def test_the_urls_token_is_never_written(self, serve: Any, tmp_path: Path) -> None:
        """Failures name the URL by scheme and host only: its path's token is in no log or warning."""
        server = serve("500")
        hook = webhook(server.url, retries=0)
        text = io.StringIO()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with MetricLogger(stream=text, json_file=tmp_path / "m.jsonl", hooks=[hook]) as log:
                log.emit("alert", alert())
                log.flush()
                log.emit("train_step", {"step": 1, "loss": 0.5})
        assert log.hook_errors == {"WebhookHook": 1}
        written = text.getvalue() + (tmp_path / "m.jsonl").read_text() + repr(hook)
        written += "".join(str(warning.message) for warning in caught)
        assert "WEBHOOKTOKEN" not in written
        assert f"http://127.0.0.1:{server.server_address[1]}/…" in written

    def test_a_full_queue_drops_and_counts_without_waiting(self, serve: Any) -> None:
        """queue_size=1 behind a hung post: the third alert is dropped at once, counted, raised."""
        server = serve("hang")
        hook = webhook(server.url, queue_size=1, timeout_s=600, close_timeout_s=0.2)
        hook.on_event("alert", alert(step=1))
        assert server.received.wait(60)  # the worker holds the first
        hook.on_event("alert", alert(step=2))  # queued
        with pytest.raises(RuntimeError, match="queue full \\(1 waiting\\): 'alert' dropped"):
            hook.on_event("alert", alert(step=3))
        assert hook.dropped == 1
        with pytest.raises(RuntimeError, match="2 events not posted"):
            hook.close()
        assert (hook.failed, hook.dropped) == (2, 1)


class TestOptions:
    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"url": "hooks.slack.com/services/x"}, "url must be an http:// or https:// URL"),
            ({"url": "ftp://host/x"}, "url must be an http:// or https:// URL"),
            ({"url": "http://host:port/x"}, "url must be an http:// or https:// URL"),
            ({"url": None}, "pass either url= or url_env="),
            (
                {"url": None, "url_env": "SPEEDTRONIC_TEST_UNSET"},
                "the environment variable 'SPEEDTRONIC_TEST_UNSET' \\(url_env\\) is not set; set it to the "
                "http:// or https:// URL",
            ),
            ({"events": "alert"}, "events must be a list of event names"),
            ({"events": 5}, "events must be a list of event names, got 5"),
            ({"headers": "x"}, "headers must be a mapping of header names to values \\(text\\), got a str$"),
            ({"headers": {"X-Token": 5}}, "headers must be a mapping .*, got a dict$"),
            ({"retries": -1}, "retries must be an int >= 0"),
            ({"timeout_s": 0}, "timeout_s must be a number of seconds > 0"),
            ({"queue_size": 0}, "queue_size must be an int >= 1"),
        ],
    )
    def test_bad_options_are_refused_by_name(self, kwargs: dict[str, Any], message: str) -> None:
        """Each bad option is a ValueError naming it, before a thread is started."""
        with pytest.raises(ValueError, match=message):
            WebhookHook(**{"url": "http://127.0.0.1:9/x", **kwargs})

    def test_both_url_and_url_env_are_refused(self) -> None:
        """One place for the URL: both at once is a ValueError."""
        with pytest.raises(ValueError, match="pass either url= or url_env="):
            WebhookHook("http://127.0.0.1:9/x", url_env="SPEEDTRONIC_TEST_WEBHOOK")

    def test_url_env_reads_the_url_from_the_environment(
        self, serve: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """url_env names the variable holding the URL, so the token stays out of the config."""
        server = serve("ok")
        monkeypatch.setenv("SPEEDTRONIC_TEST_WEBHOOK", server.url)
        hook = build_hook(
            "speedtronic.integrations.webhook:WebhookHook", {"url_env": "SPEEDTRONIC_TEST_WEBHOOK", **LOADED}
        )
        hook.on_event("alert", alert())
        hook.close()
        assert server.requests[0]["path"] == f"/services/{TOKEN}"

    def test_a_config_entry_builds_it(self, serve: Any) -> None:
        """build_hook with the factory path (the type name 'webhook' once installed) posts alerts."""
        server = serve("ok")
        hook = build_hook(
            "speedtronic.integrations.webhook:WebhookHook", {"url": server.url, "retries": 0, **LOADED}
        )
        hook.on_event("alert", alert())
        hook.close()
        assert len(server.requests) == 1

    def test_the_type_webhook_is_registered(self) -> None:
        """pyproject.toml registers 'webhook' in the speedtronic.hooks entry-point group."""
        from setuptools.config.pyprojecttoml import read_configuration

        hooks = read_configuration(ROOT / "pyproject.toml")["project"]["entry-points"]["speedtronic.hooks"]
        assert hooks["webhook"] == "speedtronic.integrations.webhook:WebhookHook"

    def test_alert_text_is_one_line(self) -> None:
        """The text of an alert: severity, rule, rank, message; a name in brackets first."""
        record = {"event": "alert", **alert(severity="error"), "rank": 3}
        assert alert_text(record, "r1") == "[r1] ERROR spike (rank 3): " + alert()["message"]

    def test_a_stall_names_its_rank_once(self) -> None:
        """A stall's message starts with its rank: the text does not say it twice (was:
        ``ERROR stall (rank 1): rank 1: no train_step ...``)."""
        message = "rank 1: no train_step for 61 s after step 140 (budget 60 s, steps)"
        record = {"event": "alert", "rule": "stall", "severity": "error", "rank": 1, "message": message}
        assert alert_text(record) == f"ERROR stall: {message}"


class TestReplay:
    def test_replay_posts_a_finished_runs_alerts(self, serve: Any, tmp_path: Path) -> None:
        """speedtronic replay RUN --hook webhook:url_env=VAR: the alerts the run recorded are posted."""
        server = serve("ok")
        with logger(tmp_path, webhook(server.url, events=["nothing"])) as log:
            log.emit("train_step", {"step": 120, "loss": 9.5})
            log.emit("alert", alert())
        plugins = tmp_path / "plugins"  # the type name 'webhook' as the installed package registers it
        (plugins / "webhook_name-0.1.dist-info").mkdir(parents=True)
        (plugins / "webhook_name-0.1.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: webhook-name\nVersion: 0.1\n"
        )
        (plugins / "webhook_name-0.1.dist-info" / "entry_points.txt").write_text(
            "[speedtronic.hooks]\nwebhook = speedtronic.integrations.webhook:WebhookHook\n"
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(plugins), str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "SPEEDTRONIC_TEST_WEBHOOK": server.url,
        }
        hook = "webhook:url_env=SPEEDTRONIC_TEST_WEBHOOK,name=replayed,timeout_s=60,close_timeout_s=120"
        done = subprocess.run(
            [sys.executable, "-m", "speedtronic", "replay", str(tmp_path / "metrics.jsonl"), "--hook", hook],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        [request] = server.requests
        assert request["body"]["text"] == f"[replayed] WARNING spike: {alert()['message']}"
        assert request["body"]["record"]["step"] == 120


class TestExit:
    def test_a_hook_never_closed_is_closed_at_exit_with_a_warning(self, tmp_path: Path) -> None:
        """A script that forgets close(): the queued alert is tried at exit; its failure is a warning,
        not a traceback."""
        refused = socket.create_server(("127.0.0.1", 0))
        port = refused.getsockname()[1]
        refused.close()  # nothing listens there now: every connection is refused
        script = (
            "from speedtronic.integrations.webhook import WebhookHook\n"
            f"hook = WebhookHook('http://127.0.0.1:{port}/services/{TOKEN}', retries=0)\n"
            "hook.on_event('alert', {'rule': 'spike', 'severity': 'warning', 'message': 'm'})\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "HookFailureWarning" in done.stderr
        assert "'alert' not posted: 1 try failed" in done.stderr
        assert "Traceback" not in done.stderr
        assert "WEBHOOKTOKEN" not in done.stderr
