"""Reading runs back: the records of a run directory (``reader``), its summary (``summary``), plots
(``plot``) and replaying it into hooks (``replay``). Nothing here imports the write path's private
helpers: a run is read through the event catalog and the public processors only."""

from speedtronic.runs.reader import (
    RATE_SUFFIX,
    RankChoice,
    Record,
    RunClock,
    RunError,
    Skipped,
    as_number,
    rate_keys,
    read_records,
    run_files,
)

__all__ = [
    "RATE_SUFFIX",
    "RankChoice",
    "Record",
    "RunClock",
    "RunError",
    "Skipped",
    "as_number",
    "rate_keys",
    "read_records",
    "run_files",
]
