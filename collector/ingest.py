"""Load trace files through the same pipeline as the in-process processor."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from collector.config import CollectorConfig, measure_processes
from collector.decode.files import read_file
from collector.dialects.spans import classify
from collector.errors import InputError
from collector.measuring import MeasuringPool
from collector.model import Issue, Item
from collector.pipeline import Pipeline
from collector.store.batch import Batch

BATCH_SIZE = 256
"""Spans a chunk holds: the unit handed to a thread or a measuring process."""
MIN_POOL_CHUNKS = 8
"""Files of at least this many chunks of :data:`BATCH_SIZE` spans are measured in worker
processes (:mod:`collector.measuring`); fewer on threads, where no process starts."""
GROUP_BYTES = 16 * 1024 * 1024
"""Files are read until their spans hold about this many bytes of attribute text (a larger file
alone), and those spans are measured and written together. A write has a cost of its own (~40 ms
here: a dozen statements and the commit), which a folder of small files, one OTLP request each,
paid per file and per chunk of it: 200 files of 100 spans took 38 s, the same spans in one file
6.8 s (BENCHMARKS.md)."""
WRITE_SPANS = 8192
"""Measured chunks are written together until they hold this many spans (the receiver writes
slices of ~7,000 to ~14,000 small spans, where a write costs about the least a span)."""


@dataclass
class _File:
    """The tool and LLM spans of one file, or of a part of a long one; the problems met reading it
    come with its last part."""

    path: str
    items: list[Item]
    size: int
    """Bytes of the spans' attribute text."""
    issues: list[Issue]
    last: bool = True


@dataclass
class IngestSummary:
    files: int = 0
    spans: int = 0
    tool_calls: int = 0
    llm_calls: int = 0
    duplicates: int = 0
    failed: int = 0
    issues: list[dict[str, str | None]] = field(default_factory=list)
    """Every problem met, as stored in ``ingest_issues`` (source, span, field, message)."""
    failed_files: list[str] = field(default_factory=list)


def ingest_files(
    paths: Iterable[str],
    config: CollectorConfig,
    progress: Callable[[str], None] | None = None,
    workers: int | None = None,
) -> IngestSummary:
    """Read, measure and store every tool and LLM span in ``paths``.

    Files are taken a group at a time (:data:`GROUP_BYTES`). A long group is measured in worker
    processes (``TOOLMETER_MEASURE_PROCESSES``, one per core, at most 4), a short one on
    ``workers`` threads (default: the number of cores, at most 4; the counter releases the GIL).
    One writer, this loop, writes the store: a group while the next is read and measured.
    """
    pipeline = Pipeline(config, collector_id=f"ingest-{os.getpid()}")
    summary = IngestSummary()
    workers = workers or min(os.cpu_count() or 1, 4)
    processes = MeasuringPool(pipeline, measure_processes())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolmeter-measure") as pool, processes:
        loader = _Loader(pipeline, pool, processes, workers, summary, progress)
        files: list[_File] = []
        for path in paths:
            for part in _read(path, summary):
                files.append(part)
                if sum(f.size for f in files) >= GROUP_BYTES:
                    loader.take(files)
                    files = []
        loader.take(files)
        loader.finish()
    pipeline.refresh_rollups()  # the days these files closed are rolled now, not at the next write
    summary.failed = pipeline.counters.failed
    return summary


def _read(path: str, summary: IngestSummary) -> Iterator[_File]:
    """The tool and LLM spans of ``path``, counted in ``summary``, in parts of about
    :data:`GROUP_BYTES` (a long JSON Lines file is read and measured a part at a time, never
    whole); a file that cannot be read is one issue of its own (spans read before it are kept)."""
    summary.files += 1
    issues: list[Issue] = []
    items: list[Item] = []
    size = 0
    try:
        for span in read_file(path, issues):
            summary.spans += 1
            kind = classify(span.name, span.attributes)
            if kind is None:
                continue
            items.append(Item(kind, span))
            size += sum(len(v) for v in span.attributes.values() if isinstance(v, (str, bytes)))
            if size >= GROUP_BYTES:
                yield _File(path, items, size, [], last=False)
                items, size = [], 0
    except InputError as e:
        summary.failed_files.append(path)
        issues.append(Issue(path, str(e).removeprefix(f"{path}: "), level="error"))
    yield _File(path, items, size, issues)


@dataclass
class _Group:
    """Files whose spans are measured, then written, together."""

    files: list[_File]
    items: list[Item]
    chunks: list[list[Item]]
    measured: Callable[[], Iterable[Batch]]


@dataclass
class _Loader:
    """Measures one group of files while the group before is written (by the calling thread)."""

    pipeline: Pipeline
    pool: ThreadPoolExecutor
    processes: MeasuringPool
    workers: int
    summary: IngestSummary
    progress: Callable[[str], None] | None
    _previous: _Group | None = None
    _spans: dict[str, int] = field(default_factory=dict)
    """Tool and LLM spans of a long file's parts written so far, for its progress line."""

    def take(self, files: list[_File]) -> None:
        """Start measuring the spans of ``files``, then write the group taken before (measured meanwhile)."""
        started = self._start(files) if files else None
        self.finish()
        self._previous = started

    def finish(self) -> None:
        if self._previous is not None:
            self._write(self._previous)
            self._previous = None

    def _start(self, files: list[_File]) -> _Group:
        """Start measuring the spans of ``files``: in the measuring processes for a long group
        (see :data:`MIN_POOL_CHUNKS`), else on the threads; a broken pool hands them to the threads."""
        items = [item for f in files for item in f.items]
        # interleaved chunks, at least two per worker, so large results spread over the cores
        n_chunks = max(self.workers * 2, -(-len(items) // BATCH_SIZE))
        chunks = [items[i::n_chunks] for i in range(n_chunks) if items[i::n_chunks]] or [[]]

        def on_threads() -> Iterable[Batch]:
            return self.pool.map(self.pipeline.build_batch, chunks)

        if len(chunks) < MIN_POOL_CHUNKS or not self.processes.usable:
            started = on_threads()
            return _Group(files, items, chunks, lambda: started)
        pending = self.processes.submit_items(chunks)

        def measured() -> Iterable[Batch]:
            got = pending()
            return on_threads() if got is None else got

        return _Group(files, items, chunks, measured)

    def _write(self, group: _Group) -> None:
        """Write a group's batches, :data:`WRITE_SPANS` spans at a time, with its files' issues."""
        pipeline, summary, items, files = self.pipeline, self.summary, group.items, group.files
        paths = list(dict.fromkeys(f.path for f in files))
        what = paths[0] if len(paths) == 1 else f"{paths[0]} and {len(paths) - 1:,} more file(s)"
        pending = pipeline.build_batch([], [i for f in files for i in f.issues])
        done = 0
        with pipeline.store.holding():  # one open and closing checkpoint for a group's writes
            for n, batch in enumerate(group.measured()):
                pending.extend(batch)
                done += len(group.chunks[n])
                if pending.tool_count + len(pending.llm_rows) < WRITE_SPANS and n < len(group.chunks) - 1:
                    continue
                result = pipeline.write(pending)
                summary.tool_calls += result.tool_calls
                summary.llm_calls += result.llm_calls
                summary.duplicates += result.duplicates
                summary.issues += pending.issue_rows
                pending = Batch()
                if self.progress and done < len(items):  # long groups: say how far they are
                    self.progress(f"{what}: {done:,} of {len(items):,} tool/LLM spans measured")
        for f in files:
            spans = self._spans.pop(f.path, 0) + len(f.items)
            if not f.last:
                self._spans[f.path] = spans
            elif self.progress:
                self.progress(f"{f.path}: {spans} tool/LLM spans")
