"""Window cost as the provider bills it: in its tokens (calibrated), with the prompt cache, in money.

Per tool, from the columns every write keeps (:mod:`collector.store.windowcost`):

* ``window_cost_tokens``: toolmeter's tokens re-read by later calls (``view_tokens x
  later_llm_calls``), cleared and compacted reads left out;
* ``provider_tokens``: the same in the reading model's tokens, where a calibration ratio is
  known for it (:mod:`collector.query.calibration`), else toolmeter's (``calibrated_share``
  says how much of the cost was calibrated);
* ``cached_tokens``: the part the prompt cache served; ``cache_known_share``: the part whose
  calls reported cache figures at all (``no_cache_figures`` lists the models that report none,
  ``no_cache_figures_why`` says what that means and what would give them);
* ``cost_without_cache`` and ``cost_with_cache``: provider tokens at the reading model's input
  price; with the cache, reads it served at the cache-read price and the first read of a
  result its reader wrote to the cache at the cache-write price (:mod:`collector.query.prices`).
  Calls of a model the price table lacks have no money figure (``unpriced_models``).
"""

from __future__ import annotations

from typing import Any

import duckdb

from collector.query.calibration import Calibration, calibrate, ratios
from collector.query.prices import PriceTable
from collector.query.ranking import Filters

CACHE_UNKNOWN = (
    "their model calls report no cached input tokens, so what the prompt cache served is unknown and their reads "
    "are priced in full. The instrumentation decides: OpenInference, OpenLLMetry, Pydantic AI, Strands and the "
    "GenAI conventions' gen_ai.usage.cache_read.input_tokens report them; openai-v2 2.4b0 on chat completions, the "
    "OpenAI Agents SDK's chat model and LlamaIndex do not"
)
"""Why reads have no cache figures, and what would give them (the tested instrumentations, README)."""

_PER_MODEL = """
    SELECT tool_name, read_by_model AS model, count(*) AS calls,
           coalesce(sum(view_tokens * coalesce(later_llm_calls, 0)), 0) AS window_cost,
           coalesce(sum(view_tokens * coalesce(cached_reads, 0)), 0) AS cached,
           coalesce(sum(view_tokens * coalesce(later_llm_calls, 0)) FILTER (WHERE cached_reads IS NOT NULL), 0)
               AS cache_known,
           coalesce(sum(view_tokens) FILTER (WHERE cache_written AND later_llm_calls > 0), 0) AS written,
           count(*) FILTER (WHERE cleared_at_ns IS NOT NULL) AS cleared_calls
    FROM tool_calls WHERE {where}
    GROUP BY tool_name, read_by_model
"""


def window_costs(
    con: duckdb.DuckDBPyConnection,
    prices: PriceTable,
    filters: Filters | None = None,
    calibrations: list[Calibration] | None = None,
) -> dict[str, Any]:
    """``{"tools": [per-tool rows, by cost], "unpriced_models": [...], "calibrations": [...], "prices": {...}}``."""
    filters = filters or Filters()
    if calibrations is None:
        calibrations = calibrate(con, filters)
    ratio_of = ratios(calibrations)
    where, params = filters.where()
    tools: dict[str, dict[str, Any]] = {}
    unpriced: dict[str, int] = {}
    no_cache_figures: set[str] = set()
    for tool, model, calls, window, cached, known, written, cleared in con.execute(
        _PER_MODEL.format(where=where), params
    ).fetchall():
        row = tools.setdefault(tool, {
            "tool": tool, "calls": 0, "window_cost_tokens": 0, "provider_tokens": 0.0, "calibrated_tokens": 0.0,
            "cached_tokens": 0.0, "cache_known_tokens": 0, "cost_without_cache": 0.0, "cost_with_cache": 0.0,
            "priced_tokens": 0, "cleared_calls": 0, "models": [],
        })  # fmt: skip
        ratio = ratio_of.get(model) if model else None
        scale = ratio if ratio is not None else 1.0
        row["calls"] += int(calls)
        row["window_cost_tokens"] += int(window)
        row["provider_tokens"] += window * scale
        row["calibrated_tokens"] += window * scale if ratio is not None else 0.0
        row["cached_tokens"] += cached * scale
        row["cache_known_tokens"] += int(known)
        row["cleared_calls"] += int(cleared)
        if window and not known:
            no_cache_figures.add(model or "(no model named)")
        if model and model not in row["models"]:
            row["models"].append(model)
        price = prices.price(model)
        if window and price is None:
            unpriced[model or "(no model named)"] = unpriced.get(model or "(no model named)", 0) + int(window)
            continue
        if price is None:
            continue
        first = min(written, window) * scale  # a result written to the cache is read fresh once
        fresh = max(window * scale - cached * scale - first, 0.0)
        row["priced_tokens"] += int(window)
        row["cost_without_cache"] += window * scale * price.input / 1e6
        row["cost_with_cache"] += (fresh * price.input + cached * scale * price.cache_read
                                   + first * price.cache_write) / 1e6  # fmt: skip
    rows = []
    for row in tools.values():
        w = row["window_cost_tokens"]
        row["calibrated_share"] = round(row.pop("calibrated_tokens") / row["provider_tokens"], 4) if w else None
        row["cache_known_share"] = round(row.pop("cache_known_tokens") / w, 4) if w else None
        row["priced_share"] = round(row.pop("priced_tokens") / w, 4) if w else None
        for k in ("provider_tokens", "cached_tokens"):
            row[k] = round(row[k])
        rows.append(row)
    rows.sort(key=lambda r: (-r["provider_tokens"], r["tool"]))
    return {
        "tools": rows,
        "unpriced_models": sorted(unpriced),
        "no_cache_figures": sorted(no_cache_figures),
        "no_cache_figures_why": CACHE_UNKNOWN if no_cache_figures else None,
        "calibrations": calibrations,
        "prices": {"taken": prices.taken, "currency": prices.currency, "source": prices.source},
    }
