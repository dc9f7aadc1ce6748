"""What one flush hands the store (:class:`Batch`) and what the store hands back (:class:`WriteResult`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from collector.store import columns

PACKED: Final = ("tool_calls", "payloads")
"""The tables whose rows a measuring process sends as Arrow tables (:meth:`Batch.pack`)."""


@dataclass
class Batch:
    """Everything one flush writes, in one transaction.

    Rows are dicts keyed by column name (the schemas in :mod:`collector.store.columns`); a
    measuring process :meth:`pack` s its tool calls and payloads into Arrow tables first.
    """

    tool_rows: list[dict[str, Any]] = field(default_factory=list)
    llm_rows: list[dict[str, Any]] = field(default_factory=list)
    payload_rows: list[dict[str, Any]] = field(default_factory=list)
    issue_rows: list[dict[str, Any]] = field(default_factory=list)
    message_rows: list[dict[str, Any]] = field(default_factory=list)
    name_rows: list[dict[str, Any]] = field(default_factory=list)
    """Tool names the messages gave for call ids whose response is not in this batch."""
    stats: dict[str, Any] | None = None
    join_traces: list[str] = field(default_factory=list)
    """Traces whose tool calls may now be joined to a message view (see WriteResult)."""
    progress: tuple[str, int, int] | None = None
    """(receiver id, spool segment, offset) reached by this batch, committed with it."""
    batch_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Identifies the batch across retries of its commit (lake stores; see committed_batches)."""
    packed: dict[str, list[pa.Table]] = field(default_factory=dict)
    """Rows already built as Arrow tables, by table name (:data:`PACKED`)."""

    def _rows(self, table: str) -> list[dict[str, Any]]:
        return self.tool_rows if table == "tool_calls" else self.payload_rows

    def pack(self) -> None:
        """Turn the tool-call and payload rows into Arrow tables (in a measuring process): they
        cross to the writer's process as a few buffers to copy rather than thousands of dicts to
        unpickle, and the writer inserts them as they are (building them took the writer's
        thread ~14 µs a small span, unpickling the dicts ~9)."""
        for table in PACKED:
            rows = self._rows(table)
            if rows:
                self.packed.setdefault(table, []).append(columns.table_of(rows, columns.TABLES[table]))
                rows.clear()

    def arrow(self, table: str) -> pa.Table | None:
        """The rows of ``table`` (one of :data:`PACKED`) as one Arrow table, packed or not; None: none."""
        rows = self._rows(table)
        parts = [columns.table_of(rows, columns.TABLES[table])] if rows else []
        parts += [t for t in self.packed.get(table, ()) if t.num_rows]  # rows first, as tool_dicts
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def tool_traces(self, column: str, value: str) -> set[str]:
        """The trace ids of the tool calls whose ``column`` is ``value``, packed or not. Packed
        calls are selected in Arrow: through Python (a tuple per call) it took ~4 us a small span,
        a sixth of the writer's time."""
        traces = {row["trace_id"] for row in self.tool_rows if row.get(column) == value}
        for t in self.packed.get("tool_calls", ()):
            chosen = pc.filter(t.column("trace_id"), pc.equal(t.column(column), value))
            traces.update(pc.unique(chosen).to_pylist())
        return traces

    def tool_dicts(self, *names: str) -> list[dict[str, Any]]:
        """The tool calls as dicts of the columns ``names`` (all of a row when not packed)."""
        return self.tool_rows + [dict(zip(names, v, strict=True)) for v in self._packed_values(names)]

    def _packed_values(self, names: tuple[str, ...]) -> list[tuple[Any, ...]]:
        values: list[tuple[Any, ...]] = []
        for t in self.packed.get("tool_calls", ()):
            values += zip(*(t.column(n).to_pylist() for n in names), strict=True)
        return values

    @property
    def tool_count(self) -> int:
        """Tool calls in the batch, packed or not."""
        return len(self.tool_rows) + sum(int(t.num_rows) for t in self.packed.get("tool_calls", ()))

    @property
    def commit_id(self) -> str:
        """The batch id, derived from the spool position when there is one (stable across restarts)."""
        if self.progress is not None:
            return f"{self.progress[0]}@{self.progress[1]}:{self.progress[2]}"
        return self.batch_id

    def extend(self, other: Batch) -> None:
        """Add another batch's rows to this one (to write them in one transaction)."""
        self.tool_rows += other.tool_rows
        self.llm_rows += other.llm_rows
        self.payload_rows += other.payload_rows
        self.issue_rows += other.issue_rows
        self.message_rows += other.message_rows
        self.name_rows += other.name_rows
        for table, parts in other.packed.items():
            self.packed.setdefault(table, []).extend(parts)

    def __len__(self) -> int:
        return self.tool_count + len(self.llm_rows) + len(self.issue_rows)


@dataclass(frozen=True)
class WriteResult:
    tool_calls: int
    llm_calls: int
    duplicates: int
    pending_joins: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls of ``Batch.join_traces`` still showing the raw although an LLM call's input
    carried their response: read in the same connection as the write, with their stored raw
    payload's location (``raw_inline``, ``raw_blob_id``, ``raw_cut``)."""
    idless_calls: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls of those traces with no call id and no view yet (to match by the conversation),
    with their stored raw payload's location."""
    unclaimed_views: list[dict[str, Any]] = field(default_factory=list)
    """Message views of those traces that no stored tool call has the id of."""
