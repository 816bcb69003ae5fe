"""Where each tracker's run went (W&B, MLflow, OpenTelemetry), as ``speedtronic train``'s closing
summary says it, read from the hooks after the run."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shlex
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from speedtronic.hooks import BackgroundHooks
from speedtronic.integrations import MlflowHook, OtelHook, WandbHook
from speedtronic.record.secrets import redact_text

__all__ = ["OTLP_DEFAULT_LOGS_ENDPOINT", "otlp_logs_endpoint", "shown_path", "tracker_lines"]

OTLP_DEFAULT_LOGS_ENDPOINT = "http://localhost:4318/v1/logs"
"""Where the OTLP/HTTP log exporter sends when neither ``endpoint`` nor the environment says."""

_LABEL = 12  # the summary's label column


def tracker_lines(hooks: Iterable[Any], typed: Callable[[str], str]) -> tuple[list[str], list[str]]:
    """``(where, commands)``: one ``  label  where`` line per tracker hook (W&B, MLflow, OTel), and the
    commands that act on those runs (``wandb sync``, ``mlflow ui``) with ``typed`` naming each program
    as the user types it. Hooks of other kinds are left out."""
    where: list[str] = []
    commands: list[str] = []
    for hook in _unwrapped(hooks):
        if isinstance(hook, WandbHook):
            _wandb(hook, where, commands, typed)
        elif isinstance(hook, MlflowHook):
            _mlflow(hook, where, commands, typed)
        elif isinstance(hook, OtelHook):
            _otel(hook, where)
    return where, commands


def _line(label: str, text: str) -> str:
    return f"  {label:<{_LABEL}} {text}"


def _unwrapped(hooks: Iterable[Any]) -> Iterator[Any]:
    for hook in hooks:
        if isinstance(hook, BackgroundHooks):  # a config entry's ``background: true``
            yield from hook.hooks
        else:
            yield hook


def shown_path(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the working directory when it is under it (as the run's other paths are
    shown), else as it is."""
    shown = Path(path)
    with contextlib.suppress(ValueError, OSError):
        shown = shown.resolve().relative_to(Path.cwd().resolve())
    return str(shown)


def _wandb(hook: WandbHook, where: list[str], commands: list[str], typed: Callable[[str], str]) -> None:
    run = hook.run
    settings = getattr(run, "settings", None)
    mode = getattr(settings, "mode", None)
    run_id = getattr(run, "id", None)
    if mode == "disabled" or getattr(run, "disabled", False):
        where.append(_line("wandb", "disabled (WANDB_MODE=disabled): nothing was recorded"))
        return
    sync_dir = getattr(settings, "sync_dir", None)
    if getattr(run, "offline", False) or mode in ("offline", "dryrun"):
        if not sync_dir:
            where.append(_line("wandb", f"offline run {run_id}"))
            return
        shown = shown_path(sync_dir)
        where.append(_line("wandb", f"{shown} (offline run {run_id}; not uploaded)"))
        parts = " ".join(shlex.quote(shown_path(part)) for part in _offline_parts(Path(sync_dir), run_id))
        commands.append(_line("upload", f"{typed('wandb')} sync {parts}"))
        return
    url = getattr(run, "url", None)
    where.append(_line("wandb", f"{url} (run {run_id})" if url else f"run {run_id}"))


def _offline_parts(sync_dir: Path, run_id: object) -> list[Path]:
    """Every offline directory of the run ``sync_dir`` is one of (a resumed run writes one per
    start, all with its id: ``wandb sync`` joins them into one run), oldest first."""
    found = sorted(
        part
        for part in sync_dir.parent.glob(f"offline-run-*-{glob.escape(str(run_id))}")
        if part.is_dir() and part.name.endswith(f"-{run_id}")
    )
    return found if sync_dir in found else [*found, sync_dir]


def _mlflow(hook: MlflowHook, where: list[str], commands: list[str], typed: Callable[[str], str]) -> None:
    uri = str(getattr(hook.client, "tracking_uri", "") or "")
    local = uri.startswith(("sqlite:", "file:")) or "://" not in uri  # a path: data, never redacted
    shown = uri if local else redact_text(uri)
    where.append(_line("mlflow", f"run {hook.run_id} in {shown}" if uri else f"run {hook.run_id}"))
    if uri and local and importlib.util.find_spec("flask") is not None:  # mlflow-skinny has no server
        commands.append(_line("mlflow ui", f"{typed('mlflow')} ui --backend-store-uri {shlex.quote(uri)}"))


def _otel(hook: OtelHook, where: list[str]) -> None:
    endpoint = redact_text(otlp_logs_endpoint(hook.endpoint))
    failed = f"; {hook.dropped:,} record(s) failed to export" if hook.dropped else ""
    where.append(_line("otel", f"{endpoint} (OTLP/HTTP logs{failed})"))


def otlp_logs_endpoint(endpoint: str | None) -> str:
    """The OTLP/HTTP logs URL an exporter made with ``endpoint`` sends to: ``endpoint``, else
    ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/logs``, else
    ``OTLP_DEFAULT_LOGS_ENDPOINT`` (the rule of OpenTelemetry's exporter configuration)."""
    if endpoint:
        return endpoint
    logs = os.environ.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
    if logs:
        return logs
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if base:
        return base.rstrip("/") + "/v1/logs"
    return OTLP_DEFAULT_LOGS_ENDPOINT
