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
MIN_POOL_CHUNKS = 8
"""A file of at least this many chunks of :data:`BATCH_SIZE` spans is measured in worker
processes (:mod:`collector.measuring`); a shorter one on threads, where no process starts."""


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

    A long file is measured in worker processes (``TOOLMETER_MEASURE_PROCESSES``, one per
    core, at most 4), a short one on ``workers`` threads (default: the number of cores, at
    most 4; the counter releases the GIL). One writer, this loop, writes the store.
    """
    pipeline = Pipeline(config, collector_id=f"ingest-{os.getpid()}")
    summary = IngestSummary()
    workers = workers or min(os.cpu_count() or 1, 4)
    processes = MeasuringPool(pipeline, measure_processes())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolmeter-measure") as pool, processes:
        for path in paths:
            summary.files += 1
            issues: list[Issue] = []
            items: list[Item] = []
            try:
                for span in read_file(path, issues):
                    summary.spans += 1
                    kind = classify(span.name, span.attributes)
                    if kind is not None:
                        items.append(Item(kind, span))
            except InputError as e:
                summary.failed_files.append(path)
                issues.append(Issue(path, str(e).removeprefix(f"{path}: "), level="error"))
            # interleaved chunks, at least two per worker, so large results spread over the cores
            n_chunks = max(workers * 2, -(-len(items) // BATCH_SIZE))
            chunks = [items[i::n_chunks] for i in range(n_chunks) if items[i::n_chunks]] or [[]]
            batches = _measured(chunks, pipeline, pool, processes)
            done = 0
            with pipeline.store.holding():  # one open and closing checkpoint for a file's chunks
                for n, batch in enumerate(batches):
                    if n == 0:
                        batch.issue_rows += pipeline.build_batch([], issues).issue_rows
                    result = pipeline.write(batch)
                    done += len(chunks[n])
                    if progress and len(chunks) > 2 * workers:  # long files: say how far we are
                        progress(f"{path}: {done:,} of {len(items):,} tool/LLM spans measured")
                    summary.tool_calls += result.tool_calls
                    summary.llm_calls += result.llm_calls
                    summary.duplicates += result.duplicates
                    summary.issues += batch.issue_rows
            if progress:
                progress(f"{path}: {len(items)} tool/LLM spans")
    pipeline.refresh_rollups()  # the days these files closed are rolled now, not at the next write
    summary.failed = pipeline.counters.failed
    return summary


def _measured(
    chunks: list[list[Item]], pipeline: Pipeline, pool: ThreadPoolExecutor, processes: MeasuringPool
) -> Iterator[Batch]:
    """The chunks' batches: from the measuring processes for a long file (see :data:`MIN_POOL_CHUNKS`),
    else from the threads; a broken pool hands the chunks to the threads."""
    if len(chunks) >= MIN_POOL_CHUNKS and processes.usable:
        parts = processes.measure_items(chunks)
        if parts is not None:
            yield from parts
            return
    yield from pool.map(pipeline.build_batch, chunks)
