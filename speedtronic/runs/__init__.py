"""Reading runs back: the records of a run directory (``reader``), one typed table per event
(``frames``: pandas or polars, imported only when a table is built), its summary (``summary``), plots
(``plot``) and replaying it into hooks (``replay``). Nothing here imports the write path's private
helpers: a run is read through the event catalog and the public processors only."""

from speedtronic.runs.frames import read_frame, read_frames
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
    "read_frame",
    "read_frames",
    "read_records",
    "run_files",
]
