"""Shaping lists and records: an envelope of items that fits its budget, and records projected.

A list's view is an envelope: ``summary`` (computed over every item), ``items`` (projected,
in a stable order, as many as fit), ``total``, ``truncated``, ``handle`` and ``next``. The
number of items is the largest that keeps the whole envelope, counted exactly, within the
budget; when even no items do, the summary is shortened (``summary_cut``), then dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collector.adapter import positions as S
from collector.adapter.handles import HandleStore, keep, project
from collector.adapter.policy import Policy, Scope
from collector.adapter.summary import shorter, summarize
from collector.adapter.view import View, render, tokens

LIST_KEYS = ("items", "data", "results", "rows", "records", "entries", "hits", "orders", "values")
"""Keys an object's list is looked for under first (then any list-valued key)."""


def find_items(raw: str, parsed: Any, policy: Policy) -> tuple[list[Any], list[S.Span]] | None:
    """The list's items and their character spans in ``raw``, or None when it holds no list."""
    start = len(raw) - len(raw.lstrip())
    if isinstance(parsed, list):
        values, spans, _ = S.array_items(raw, start)
        return values, spans
    if not isinstance(parsed, dict):
        return None
    key = policy.items_key
    if key is None:
        candidates = [k for k in LIST_KEYS if isinstance(parsed.get(k), list)]
        candidates += [k for k, v in parsed.items() if isinstance(v, list) and k not in candidates]
        key = candidates[0] if candidates else None
    if key is None or not isinstance(parsed.get(key), list):
        return None
    _, members, _ = S.object_members(raw, start)
    values, spans, _ = S.array_items(raw, S.value_start(raw, members[key]))
    return values, spans


def _order(items: list[Any], policy: Policy) -> list[int]:
    """Item indices in the order shown: by ``sort_key`` (stable; items without it last), or as given."""
    if policy.sort_key is None:
        return list(range(len(items)))
    key = policy.sort_key
    present = [i for i, item in enumerate(items) if isinstance(item, dict) and item.get(key) is not None]
    missing = [i for i, item in enumerate(items) if not (isinstance(item, dict) and item.get(key) is not None)]

    def rank(i: int) -> tuple[int, Any]:
        value = items[i][key]
        if isinstance(value, bool):
            return (0, int(value))
        if isinstance(value, (int, float)):
            return (0, value)
        return (1, str(value))

    return sorted(present, key=rank, reverse=policy.descending) + missing


def _largest_fitting(fits: Callable[[int], bool], most: int) -> int:
    """The largest k in [0, most] with ``fits(k)``, probing only sizes near the answer (doubling,
    then halving): k = 0 is assumed to fit. The answer is always one that was counted."""
    if most == 0 or not fits(1):
        return 0
    good, bad = 1, None
    while bad is None:
        probe = min(good * 2, most)
        if probe == good:
            return good
        if fits(probe):
            good = probe
        else:
            bad = probe
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def _suggested_filter(summary: dict[str, Any], current: str | None) -> str | None:
    """A filter on the rarest value of a categorical field (the one most worth narrowing to),
    unless it is the filter already applied."""
    best: tuple[int, str, str] | None = None
    for name, figures in summary.items():
        if not isinstance(figures, dict) or len(figures.get("counts", {})) < 2:
            continue
        value, n = min(figures["counts"].items(), key=lambda kv: (kv[1], kv[0]))
        if best is None or (n, name) < (best[0], best[1]):
            best = (n, name, value)
    if best is None or not best[1].isidentifier():
        return None
    expr = f"{best[1]} == {best[2]!r}"
    return None if expr == current else expr


def shape_list(raw: str, parsed: Any, policy: Policy, scope: Scope, store: HandleStore,
               applied_filter: str | None = None) -> View | None:  # fmt: skip
    """The envelope of a list result, or None when ``parsed`` holds no list."""
    found = find_items(raw, parsed, policy)
    if found is None:
        return None
    items, spans = found
    order = _order(items, policy)
    snapshot = [items[i] for i in order]
    handle = keep(store, scope, items=snapshot, fields=policy.fields, size=len(raw))
    shown = [project(item, policy.fields) for item in snapshot]
    total = len(items)
    most = total if policy.max_items is None else min(total, policy.max_items)
    full = summarize(snapshot)

    def envelope(k: int, summary: dict[str, Any] | None, cut: bool, guidance: bool = True) -> dict[str, Any]:
        env: dict[str, Any] = {}
        if summary is not None:
            env["summary"] = summary
            if cut:
                env["summary_cut"] = True
        env.update(items=shown[:k], total=total, truncated=k < total, handle=handle)
        if k < total and guidance:
            env["next"] = _guidance(handle, k, summary or full, applied_filter)
        return env

    chosen: dict[str, Any] | None = None
    for level, summary in enumerate([full, *shorter(full), None]):

        def fits(k: int, summary: dict[str, Any] | None = summary, cut: bool = level > 0) -> bool:
            return tokens(render(envelope(k, summary, cut))) <= policy.budget_tokens

        if fits(0):
            k = _largest_fitting(fits, most)
            chosen = envelope(k, summary, level > 0)
            break
    if chosen is None:  # the bare envelope without guidance (Policy's minimum budget keeps this in)
        chosen = envelope(0, None, False, guidance=False)
    k = len(chosen["items"])
    kept = order[:k]
    projected = policy.fields is not None and any(
        isinstance(item, dict) and set(item) - set(policy.fields) for item in snapshot[:k]
    )  # fmt: skip
    return View(render(chosen), k < total or projected, S.merged((spans[i] for i in kept), raw), chosen,
                total, sorted(kept), handle)  # fmt: skip


def _guidance(handle: str, shown: int, summary: dict[str, Any], applied_filter: str | None) -> str:
    text = f"read_result(handle='{handle}', offset={shown}, limit={max(shown, 1)}) returns the next items"
    expr = _suggested_filter(summary, applied_filter)
    if expr is not None:
        text += f"; filter_result(handle='{handle}', expr=\"{expr}\") narrows them"
    return text


def shape_record(raw: str, parsed: Any, policy: Policy, scope: Scope, store: HandleStore) -> View | None:
    """A record projected to the policy's fields, then fields dropped in order until it fits."""
    if not isinstance(parsed, dict):
        return None
    start = len(raw) - len(raw.lstrip())
    _, members, _ = S.object_members(raw, start)
    wanted = [f for f in (policy.fields or tuple(parsed)) if f in parsed]
    whole = {f: parsed[f] for f in wanted}
    handle = keep(store, scope, items=[parsed], size=len(raw))
    if len(wanted) == len(parsed) and tokens(render(parsed)) <= policy.budget_tokens:
        return View(render(parsed), False, [(start, len(raw.rstrip()))], parsed, handle=handle)
    kept: dict[str, Any] = {}

    def view_of(record: dict[str, Any], left_out: list[str]) -> dict[str, Any]:
        env: dict[str, Any] = {"record": record, "truncated": True, "omitted_fields": left_out, "handle": handle}
        env["next"] = (
            f"read_result(handle='{handle}', offset=0, limit=1, fields={left_out!r}) returns the omitted fields"
        )
        return env

    for name in wanted:  # greedy in the policy's order: a field that does not fit is left out
        trial = {**kept, name: whole[name]}
        rest = [f for f in parsed if f not in trial]
        if tokens(render(view_of(trial, rest))) <= policy.budget_tokens:
            kept = trial
    omitted = [f for f in parsed if f not in kept]
    # a record with very many field names: their count instead of the list, then no fields
    candidates: list[dict[str, Any]] = [
        view_of(kept, omitted),
        {"record": kept, "truncated": True, "omitted_fields": len(omitted), "handle": handle},
        {"record": {}, "truncated": True, "omitted_fields": len(parsed), "handle": handle},
    ]
    env = next((c for c in candidates if tokens(render(c)) <= policy.budget_tokens), candidates[-1])
    shown = env["record"]
    return View(render(env), True, S.merged((members[f] for f in shown), raw), env, handle=handle)
