"""What a retention run removed (or, a dry run, would remove), as ``toolmeter prune`` and
``serve`` print it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

BLOB_GRACE = timedelta(minutes=10)
"""Unreferenced payload files younger than this are kept: their batch may not have committed yet."""


@dataclass
class PruneSummary:
    """What a run removed, and the store's size before and after (bytes; None on a lake)."""

    rows_before: datetime | None
    payloads_before: datetime | None
    removed: dict[str, int] = field(default_factory=dict)
    payload_files: int = 0
    payload_file_bytes: int = 0
    payload_files_young: int = 0
    """Unreferenced payload files kept because they are younger than :data:`BLOB_GRACE`."""
    size_before: int | None = None
    size_after: int | None = None
    file_bytes_after: int | None = None
    compacted: str | None = None
    """Why the file was rewritten (None: it was not)."""
    no_room: str | None = None
    """Why a rewrite worth doing was not done: the disk had too little free space."""
    capped: bool = False
    max_bytes: int | None = None
    """The size cap the run had to fit (None: none)."""
    calls_after: int | None = None
    """Tool calls left in the store after the run (None on a lake)."""
    dry_run: bool = False
    """Counts of what a run would remove; nothing was (``compacted``: why it would rewrite)."""

    def lines(self) -> list[str]:
        when = [f"rows before {_day(self.rows_before)}", f"payloads before {_day(self.payloads_before)}"]
        if self.dry_run:
            return ["would remove " + ", ".join(when), *self._what_goes(), *self._rehearsed()]
        out = ["removed " + ", ".join(when) + (" (and the oldest, to fit the size cap)" if self.capped else "")]
        out += self._what_goes()
        if self.size_after is None:
            out.append("size not measured on a DuckLake: its catalog and data path hold it")
        elif self.size_before is not None:
            out.append(f"store {_mb(self.size_before)} -> {_mb(self.size_after)}"
                       + (f" (file {_mb(self.file_bytes_after)}, rewritten: {self.compacted})" if self.compacted else ""))  # fmt: skip
        if self.no_room:
            out.append(self.no_room)
        if self.max_bytes is not None and self.size_after is not None and self.size_after > self.max_bytes:
            out.append(f"still over the size cap of {_mb(self.max_bytes)}: {self._why_over()}")
        return out

    def _what_goes(self) -> list[str]:
        """The rows by table and the payload files removed (or, a dry run, that would be)."""
        out = [", ".join(f"{table} {n:,}" for table, n in self.removed.items() if n) or "nothing to remove"]
        if self.payload_files:
            out.append(f"payload files {self.payload_files:,} ({_mb(self.payload_file_bytes)})")
        if self.payload_files_young:
            kept = "no row would point at would be kept" if self.dry_run else "no row points at were kept"
            out.append(f"{self.payload_files_young:,} payload file(s) {kept}: written in the last "
                       f"{BLOB_GRACE.seconds // 60} minutes (a batch may be committing)"
                       + ("" if self.dry_run else "; the next run removes them"))  # fmt: skip
        return out

    def _rehearsed(self) -> list[str]:
        """A dry run's size, against the cap, and the rewrite it would make."""
        if self.size_before is None:
            return ["size not measured on a DuckLake: its catalog and data path hold it"]
        out = [f"store {_mb(self.size_before)} now"]
        if self.max_bytes is not None and self.size_before > self.max_bytes:
            out.append(f"over the size cap of {_mb(self.max_bytes)}: after the above, a run removes the oldest "
                       "payloads, then the oldest rows, until the store fits (a dry run does not work out how many)")  # fmt: skip
        elif self.max_bytes is not None:
            out.append(f"within the size cap of {_mb(self.max_bytes)}")
        if self.compacted:
            out.append(f"the file would be rewritten: {self.compacted} (as it is now; what goes may free more)")
        return out

    def _why_over(self) -> str:
        """Why a run that had a size cap ended above it."""
        why = []
        if self.payload_files_young:
            why.append("payload files written in the last few minutes were kept (above)")
        if self.calls_after == 0:
            why.append("no call is left to remove; the rest is the file's own tables (rollups, counters, alerts)")
        elif not self.compacted:
            why.append(
                "the file was not rewritten, and DuckDB gives back a block only once every row in it is gone "
                "(`toolmeter prune` rewrites it, unless --no-compact; a running `serve` only when the requests "
                "coming in meanwhile fit in its queue)"
            )
        return "; ".join(why) or f"{self.calls_after:,} call(s) are left and could not be removed"


def _day(t: datetime | None) -> str:
    return "never (kept forever)" if t is None else f"{t:%Y-%m-%d %H:%M} UTC"


def _mb(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 1e3:,.1f} KB" if n < 100_000 else f"{n / 1e6:,.1f} MB"
