"""What one flush hands the store (:class:`Batch`) and what the store hands back (:class:`WriteResult`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Batch:
    """Everything one flush writes, in one transaction.

    Rows are dicts keyed by column name (the schemas in :mod:`collector.store.columns`).
    """

    tool_rows: list[dict[str, Any]] = field(default_factory=list)
    llm_rows: list[dict[str, Any]] = field(default_factory=list)
    payload_rows: list[dict[str, Any]] = field(default_factory=list)
    issue_rows: list[dict[str, Any]] = field(default_factory=list)
    message_rows: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    join_traces: list[str] = field(default_factory=list)
    """Traces whose tool calls may now be joined to a message view (see WriteResult)."""
    progress: tuple[str, int, int] | None = None
    """(receiver id, spool segment, offset) reached by this batch, committed with it."""
    batch_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Identifies the batch across retries of its commit (lake stores; see committed_batches)."""

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

    def __len__(self) -> int:
        return len(self.tool_rows) + len(self.llm_rows) + len(self.issue_rows)


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
