"""Bounding tool results at the tool boundary, recorded as it happens.

Declare a :class:`Policy` per tool (a budget in exact tokens and a shape), and pass each raw
result through :func:`shape` before the model sees it::

    from collector.adapter import Policy, Scope, shape

    ORDERS = Policy(budget_tokens=1500, shape="list", fields=("id", "date", "status", "amount"),
                    sort_key="date", descending=True)
    shaped = shape(rows, ORDERS, Scope(run_id=run.id, principal=user.id))
    return shaped.view

The whole result stays behind ``shaped.handle`` (:func:`read_result`, :func:`filter_result`);
the view, the budget, what was left out (byte ranges, list items) and the handle are put on
the current span, so toolmeter records declared truncation rather than inferring it.
Nothing here imports DuckDB, the receiver or the dashboard.
"""

from collector.adapter.compaction import Replacement, compact
from collector.adapter.handles import (
    DirectoryHandles,
    HandleError,
    HandleStore,
    MemoryHandles,
    filter_result,
    read_result,
)
from collector.adapter.policy import Policy, Scope
from collector.adapter.shaping import Shaped, default_store, shape
from collector.adapter.summary import summarize

__all__ = [
    "DirectoryHandles",
    "HandleError",
    "HandleStore",
    "MemoryHandles",
    "Policy",
    "Replacement",
    "Scope",
    "Shaped",
    "compact",
    "default_store",
    "filter_result",
    "read_result",
    "shape",
    "summarize",
]
