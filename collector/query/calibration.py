"""Calibration: how many of the provider's tokens one of toolmeter's tokens is, per model, from
the usage the traces themselves report.

toolmeter counts with OpenAI's encodings; Claude and Gemini bill in their own tokens. Two
consecutive model calls of a trace tell the difference: the second one's input tokens, less
the first one's input and output, is what the turn added (in the provider's tokens). When
what it added is the tool results between the two calls (counted by toolmeter as
``view_tokens``), the ratio of the two is the model's tokens per toolmeter token.

A turn is used when both calls report input tokens and the first its output, the second
neither cleared nor compacted anything, both are the same model, every result between them
was counted and the turn added more than nothing. The ratio is the sum of the provider's
tokens over the sum of toolmeter's (large turns weigh more), with a 95 % interval from
resampling the turns (seeded: the same store gives the same interval). Fewer than
:data:`MIN_TURNS` turns calibrate nothing, and the figure says so.

What a turn adds beyond the results (the framing of each tool message, a user message the
agent added, reasoning the provider drops from later inputs) moves the ratio; the per-turn
spread shows in the interval.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import duckdb

from collector.query.ranking import Filters

MIN_TURNS = 5
"""Fewer turns than this give no ratio."""
RESAMPLES = 400
UNKNOWN_MODEL = "(no model named)"


@dataclass(frozen=True)
class Calibration:
    """The ratio of provider tokens to toolmeter tokens of one model (and shape, where given)."""

    model: str
    shape: str | None
    turns: int
    ratio: float | None
    low: float | None
    high: float | None
    reason: str | None = None
    """Why there is no ratio (None when there is one)."""

    @property
    def calibrated(self) -> bool:
        return self.ratio is not None


_TURNS = """
    WITH l AS (
        SELECT trace_id, start_ns, end_ns, coalesce(model, '{unknown}') AS model, input_tokens, cleared_tool_uses,
               compacted, compaction_parts,
               lag(input_tokens) OVER w AS prev_input, lag(output_tokens) OVER w AS prev_output,
               lag(end_ns) OVER w AS prev_end, lag(coalesce(model, '{unknown}')) OVER w AS prev_model,
               lag(compaction_parts) OVER w AS prev_parts
        FROM llm_calls WHERE {llm_where}
        WINDOW w AS (PARTITION BY trace_id ORDER BY start_ns)),
    turn AS (
        SELECT l.trace_id, l.start_ns, any_value(l.model) AS model,
               any_value(l.input_tokens - l.prev_input - l.prev_output) AS added,
               sum(t.view_tokens) AS ours, count(*) AS results, count(t.view_tokens) AS counted,
               min(t.shape) AS shape_lo, max(t.shape) AS shape_hi
        FROM l JOIN tool_calls t ON t.trace_id = l.trace_id AND t.start_ns >= l.prev_end AND t.end_ns <= l.start_ns
        WHERE l.prev_input IS NOT NULL AND l.input_tokens IS NOT NULL AND l.prev_output IS NOT NULL
          AND coalesce(l.cleared_tool_uses, 0) = 0 AND NOT coalesce(l.compacted, false)
          AND coalesce(l.compaction_parts, 0) <= coalesce(l.prev_parts, 0) AND l.model = l.prev_model
        GROUP BY l.trace_id, l.start_ns)
    SELECT model, CASE WHEN shape_lo = shape_hi THEN shape_lo END, added, ours
    FROM turn WHERE counted = results AND ours > 0 AND added > 0
"""


def _llm_where(filters: Filters) -> tuple[str, list[Any]]:
    """The time range and services of ``filters``, over ``llm_calls``."""
    where, params = Filters(filters.since, filters.until, filters.services).where()
    return where, params


def turns(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> list[tuple[str, str | None, int, int]]:
    """(model, shape of the turn's results or None when mixed, provider tokens added, toolmeter tokens)."""
    where, params = _llm_where(filters or Filters())
    sql = _TURNS.format(llm_where=where, unknown=UNKNOWN_MODEL)
    return [(m, s, int(a), int(o)) for m, s, a, o in con.execute(sql, params).fetchall()]


def models_seen(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> dict[str, int]:
    """Model -> calls reporting input tokens, for every model with a call in range."""
    where, params = _llm_where(filters or Filters())
    rows = con.execute(
        f"SELECT coalesce(model, '{UNKNOWN_MODEL}'), count(input_tokens) FROM llm_calls WHERE {where} GROUP BY 1",
        params,
    ).fetchall()
    return {m: int(n) for m, n in rows}


def fit(model: str, shape: str | None, pairs: list[tuple[int, int]]) -> Calibration:
    """The ratio of ``pairs`` (provider tokens, toolmeter tokens) with its 95 % interval."""
    if len(pairs) < MIN_TURNS:
        reason = f"{len(pairs)} usable turn(s); {MIN_TURNS} needed"
        return Calibration(model, shape, len(pairs), None, None, None, reason)
    ratio = sum(a for a, _ in pairs) / sum(o for _, o in pairs)
    rng = random.Random(0)
    estimates = []
    for _ in range(RESAMPLES):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        estimates.append(sum(a for a, _ in sample) / sum(o for _, o in sample))
    estimates.sort()
    low, high = estimates[int(0.025 * RESAMPLES)], estimates[int(0.975 * RESAMPLES) - 1]
    return Calibration(model, shape, len(pairs), round(ratio, 4), round(low, 4), round(high, 4))


def calibrate(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> list[Calibration]:
    """Per model (then per model and result shape, where a shape has turns of its own): the ratio,
    or why there is none. Every model with a call in range is listed."""
    by_model: dict[str, list[tuple[int, int]]] = {}
    by_shape: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for model, shape, added, ours in turns(con, filters):
        by_model.setdefault(model, []).append((added, ours))
        if shape is not None:
            by_shape.setdefault((model, shape), []).append((added, ours))
    out = []
    for model, reporting in sorted(models_seen(con, filters).items()):
        pairs = by_model.get(model, [])
        c = fit(model, None, pairs)
        if not pairs:
            why = ("its calls report no input tokens (the instrumentation records no usage)" if not reporting
                   else "no two consecutive calls with only counted tool results between them")  # fmt: skip
            c = Calibration(model, None, 0, None, None, None, why)
        out.append(c)
        for (m, shape), shaped in sorted(by_shape.items()):
            if m == model and len(shaped) >= MIN_TURNS and len(shaped) < len(pairs):
                out.append(fit(model, shape, shaped))
    return out


def ratios(calibrations: list[Calibration]) -> dict[str, float]:
    """Model -> its overall ratio, for the calibrated models."""
    return {c.model: c.ratio for c in calibrations if c.shape is None and c.ratio is not None}
