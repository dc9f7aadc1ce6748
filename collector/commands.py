"""The one-shot commands: ``ingest``, ``top``, ``doctor``, ``alerts``, ``check``, ``whatif``, ``lake maintain``, ``migrate``.

Each returns the process's exit code; errors toolmeter raises on purpose are turned into one
line by :func:`collector.cli.main`.
"""

import argparse
import glob
import json
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from collector import config as config_module
from collector.config import CollectorConfig
from collector.errors import InputError
from collector.ingest import ingest_files
from collector.query.ranking import collector_totals, ranking
from collector.query.whatif import parse_budget, suggestions, whatif
from collector.store.database import read_connection
from collector.store.lake import is_lake, redact


def format_tokens(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 100:.0f}%"


def expand_patterns(patterns: list[str]) -> list[str]:
    paths: list[str] = []
    for pattern in patterns:
        if os.path.isdir(pattern):
            found = sorted(glob.glob(os.path.join(pattern, "*.json")) + glob.glob(os.path.join(pattern, "*.json.gz")))
            found += sorted(glob.glob(os.path.join(pattern, "*.jsonl")))
            paths += found
        else:
            matches = sorted(glob.glob(pattern))
            paths += matches or [pattern]
    return paths


def cmd_ingest(args: argparse.Namespace) -> int:
    config = CollectorConfig.resolve(
        db=args.db, encoding=args.encoding, store_payloads=False if args.numbers_only else None
    )
    paths = expand_patterns(args.files)
    if not paths:
        print("toolmeter: no trace files given", file=sys.stderr)
        return 2
    summary = ingest_files(paths, config, progress=None if args.quiet else lambda m: print(m, file=sys.stderr))
    for issue in summary.issues:
        where = issue["source"] or ""
        if issue.get("span_id"):
            where += f" span {issue['span_id']}"
        if issue.get("field"):
            where += f" field {issue['field']}"
        print(f"toolmeter: {issue['level']}: {where}: {issue['message']}", file=sys.stderr)
    print(
        f"ingested {summary.files} file(s) into {redact(config.db)}: {summary.tool_calls} tool calls, "
        f"{summary.llm_calls} LLM calls, {summary.duplicates} already stored, {summary.failed} failed, "
        f"{len(summary.issues)} issue(s)"
    )
    if summary.tool_calls and not args.no_alerts:
        # the alert a user expects after loading traces (the demo shows one) exists only once evaluated
        from collector.alerts.evaluation import evaluate
        from collector.alerts.rules import load_rules

        new = evaluate(config.db, load_rules(args.rules))
        for alert in new:
            print(f"alert: {alert.summary}")
        if new:
            print(f"{len(new)} new alert(s): `toolmeter alerts --db {redact(config.db)}` lists them")
    return 1 if summary.failed_files else 0


def cmd_top(args: argparse.Namespace) -> int:
    with read_connection(args.db) as con:
        rows = ranking(con, by=args.by, exact=True if args.exact else (False if args.rollups else None))
        totals = collector_totals(con)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print(f"no tool calls in {redact(args.db)} yet")
        return 0
    header = f"{'tool':<24} {'calls':>6} {'view p50':>9} {'p95':>8} {'p99':>8} {'max':>8} {'raw p99':>8} {'trunc':>6} {'raw>bud':>7} {'view>bud':>8} {'window cost':>11}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['tool'][:24]:<24} {r['calls']:>6} {format_tokens(r['view_tokens_p50']):>9} "
            f"{format_tokens(r['view_tokens_p95']):>8} {format_tokens(r['view_tokens_p99']):>8} "
            f"{format_tokens(r['view_tokens_max']):>8} {format_tokens(r['raw_tokens_p99']):>8} "
            f"{_pct(r['truncated_rate']):>6} {_pct(r['raw_over_budget_rate']):>7} {_pct(r['view_over_budget_rate']):>8} "
            f"{format_tokens(r['window_cost_tokens']):>11}"
        )
    if rows[0]["percentiles"] == "rollup":
        print(
            "\npercentiles: from daily rollups, within 1 % of exact (counts, maxima and rates are exact); "
            "--exact reads every call"
        )
    if totals["dropped"] or totals["failed"]:
        print(
            f"\nnote: collectors dropped {totals['dropped']} and failed {totals['failed']} span(s); see collector_stats"
        )
    return 0


def _doctor_table(rows: list[dict[str, Any]]) -> list[str]:
    header = (
        f"{'service':<20} {'dialect':<13} {'calls':>6} {'raw':>5} {'view':>5} {'call id':>7} "
        f"{'joined id/ord+cont/ord':>22} {'from msgs':>9} {'envelopes (+tokens)':>19} {'LLM calls':>9}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        joined = f"{r['joined_by_call_id']}/{r['joined_by_order_content']}/{r['joined_by_order']}"
        envelopes = (
            f"{r['envelopes_removed']} (+{format_tokens(r['wrapper_tokens'])})" if r["envelopes_removed"] else "0"
        )
        lines.append(
            f"{str(r['service'] or '-')[:20]:<20} {str(r['dialect'] or '-')[:13]:<13} {r['calls']:>6} "
            f"{_pct(r['raw_rate']):>5} {_pct(r['view_rate']):>5} {_pct(r['call_id_rate']):>7} {joined:>22} "
            f"{r['from_messages']:>9} {envelopes:>19} {r['llm_calls']:>9}"
        )
    return lines


def cmd_doctor(args: argparse.Namespace) -> int:
    from collector.query.coverage import check_store, coverage

    with read_connection(args.db) as con:
        check_store(con, redact(args.db))
        rows = coverage(con)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print(f"no tool calls or LLM calls in {redact(args.db)} yet")
        return 0
    print(f"coverage of {redact(args.db)}: share of tool calls with a measured raw result, a view the model was")
    print("shown (joined from its input messages or declared; otherwise the raw is assumed), and a call id\n")
    for line in _doctor_table(rows):
        print(line)
    hinted = [r for r in rows if r["hints"]]
    if hinted:
        print("\nhints (only where a gap exists):")
    for r in hinted:
        print(f"\n{r['service'] or '-'} / {r['dialect'] or '-'}:")
        for hint in r["hints"]:
            print(f"  - {hint}")
    return 0


def cmd_lake_maintain(args: argparse.Namespace) -> int:
    from collector.store.maintenance import maintain

    summary = maintain(args.db, snapshots_older_than=timedelta(seconds=parse_duration(args.keep_snapshots)))
    print(f"maintained {redact(args.db)}:")
    for line in summary.lines():
        print(f"  {line}")
    return 0


def retention_of(args: argparse.Namespace) -> Any:
    """The retention the command line (else the environment, else the defaults) asks for."""
    from collector.store.retention import Retention

    rows, payloads, cap = config_module.retention(args.retain, args.retain_payloads, args.max_size)
    return Retention(rows=rows, payloads=payloads, max_bytes=cap)


def cmd_prune(args: argparse.Namespace) -> int:
    from collector.store.retention import prune

    if not is_lake(args.db) and not os.path.exists(args.db):
        # pruning would make an empty store there: a mistyped path would look like a store with
        # nothing to remove
        raise InputError(
            f"--db: no toolmeter store at {args.db}; nothing was pruned or made. Give the store that "
            "`toolmeter serve` or `ingest` writes (or set TOOLMETER_DB)."
        )
    summary = prune(args.db, retention_of(args), compact=not args.no_compact, dry_run=args.dry_run)
    print(f"dry run on {redact(args.db)}, nothing removed:" if args.dry_run else f"pruned {redact(args.db)}:")
    for line in summary.lines():
        print(f"  {line}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from collector.store.maintenance import migrate

    copied = migrate(args.source, args.db, progress=lambda m: print(f"  {m}", flush=True))
    print(f"migrated {args.source} into {redact(args.db)}: {sum(copied.values()):,} row(s)")
    return 0


def _parse_since(text: str | None) -> datetime | None:
    if not text:
        return None
    m = re.fullmatch(r"(\d+)([hd])", text)
    if m:
        n = int(m.group(1))
        return datetime.now(UTC).replace(tzinfo=None) - (timedelta(hours=n) if m.group(2) == "h" else timedelta(days=n))
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"--since {text!r}: give a date (2026-11-16), a time (2026-11-16T09:00) or an age (24h, 7d)"
        ) from None


def cmd_alerts(args: argparse.Namespace) -> int:
    from collector.alerts.evaluation import evaluate, list_alerts, set_state
    from collector.alerts.rules import load_rules

    if args.ack or args.resolve:
        set_state(args.db, args.ack or args.resolve, "acknowledged" if args.ack else "resolved")
    if args.evaluate:
        evaluate(args.db, load_rules(args.rules))
    rows = list_alerts(args.db, _parse_since(args.since))
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print(
            f"no alerts in {redact(args.db)}"
            + ("" if args.evaluate else " (evaluate with --evaluate or run `toolmeter watch`)")
        )
        return 0
    for r in rows:
        delivered = (
            "delivered"
            if r["delivered_at"]
            else (f"delivery failed: {r['delivery_error']}" if r["delivery_error"] else "")
        )
        print(
            f"[{r['state']}] {r['alert_id']}  {r['change_at']:%Y-%m-%d}  {r['summary']}"
            + (f"  ({delivered})" if delivered else "")
        )
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import tempfile

    from collector.alerts.gate import check, store_for
    from collector.alerts.rules import load_rules

    rules = load_rules(args.rules)
    with tempfile.TemporaryDirectory(prefix="toolmeter-check-") as work:
        failures, notes = check(store_for(args.baseline, work), store_for(args.candidate, work), rules)
    if args.json:
        print(json.dumps({"passed": not failures, "failures": [vars(f) for f in failures], "notes": notes}, indent=2))
        return 1 if failures else 0
    for note in notes:
        print(f"note: {note}")
    if not failures:
        print("toolmeter check: passed: no tool's envelope grew past the rules")
        return 0
    print(f"toolmeter check: FAILED: {len(failures)} rule(s)")
    print(f"{'tool':<24} {'metric':<20} {'before':>10} {'after':>10} {'ratio':>7}  rule")
    for f in failures:
        pct = "rate" in f.metric
        before = f"{f.before * 100:.0f}%" if pct else f"{f.before:,.0f}"
        after = f"{f.after * 100:.0f}%" if pct else f"{f.after:,.0f}"
        ratio = f"{f.ratio:.2f}x" if f.ratio and not pct else ""
        print(f"{f.tool:<24} {f.metric:<20} {before:>10} {after:>10} {ratio:>7}  {f.threshold}")
        for key in ("added", "removed", "changed"):
            if f.schema.get(key):
                print(f"{'':<24} schema {key}: {', '.join(f.schema[key][:8])}")
    return 1


def parse_duration(text: str) -> float:
    """'90s', '15m', '1h', '7d' or plain seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise InputError(f"duration {text!r}: use seconds, or a number with s, m, h or d (e.g. 1h)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def cmd_whatif(args: argparse.Namespace) -> int:
    budgets = dict(parse_budget(spec) for spec in args.budget)
    since = None
    if args.days is not None:
        since = int((datetime.now(UTC) - timedelta(days=args.days)).timestamp() * 1e9)
    with read_connection(args.db) as con:
        figures = [o.figures() for o in whatif(con, args.db, budgets, since_ns=since, keep_last=args.keep_last)]
        suggested = suggestions(con, args.share, args.window)
    if args.json:
        print(json.dumps({"budgets": figures, "suggestions": suggested}, indent=2))
        return 0
    if figures:
        header = (f"{'tool':<22} {'budget':>7} {'replayed':>9} {'p99 before':>10} {'after':>7} {'tokens before':>13} "
                  f"{'after':>9} {'window cost':>11} {'after':>9} {'saved':>6} {'trunc':>12} {'lost: errors':>12} "
                  f"{'items':>7} {'lines':>7}")  # fmt: skip
        print(header)
        print("-" * len(header))
        for f in figures:
            saved = f["window_cost_saved"] / f["window_cost_before"] if f["window_cost_before"] else None
            trunc = f"{_pct(f['truncated_rate_before'])}>{_pct(f['truncated_rate_after'])}"
            print(f"{f['tool'][:22]:<22} {f['budget_tokens']:>7,} {f['replayed']:>4}/{f['calls']:<4} "
                  f"{format_tokens(f['p99_before']):>10} {format_tokens(f['p99_after']):>7} "
                  f"{format_tokens(f['tokens_before']):>13} {format_tokens(f['tokens_after']):>9} "
                  f"{format_tokens(f['window_cost_before']):>11} {format_tokens(f['window_cost_after']):>9} "
                  f"{_pct(saved):>6} {trunc:>12} {f['lost_error_lines']:>12,} {f['lost_items']:>7,} "
                  f"{f['lost_lines']:>7,}")  # fmt: skip
            for reason, n in f["not_replayed"].items():
                print(f"   not replayed: {n} call(s), {reason}")
    print(f"\nbudgets that keep each tool's p99 within {args.share:.0%} of a {args.window:,}-token window:")
    for s in suggested:
        verdict = f"budget {s['suggested_budget']:,}" if s["suggested_budget"] else "within already"
        print(f"   {s['tool'][:30]:<30} p99 {format_tokens(s['p99']):>8}  {verdict}")
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from collector.query import prices
    from collector.query.cost import window_costs
    from collector.query.ranking import Filters
    from collector.query.runs import run_distribution

    table = prices.load(args.prices)
    since = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=args.days) if args.days is not None else None
    filters = Filters(since=since)
    with read_connection(args.db) as con:
        costs = window_costs(con, table, filters)
        runs = run_distribution(con, filters)
    if args.json:
        calibrations = [asdict(c) for c in costs["calibrations"]]
        print(json.dumps({**costs, "calibrations": calibrations, "runs": runs}, indent=2, default=str))
        return 0
    print("calibration (provider tokens per toolmeter token, from the traces' reported usage):")
    for c in costs["calibrations"]:
        label = c.model + (f" [{c.shape}]" if c.shape else "")
        verdict = f"{c.ratio:.3f} (95% {c.low:.3f}-{c.high:.3f})" if c.calibrated else f"uncalibrated: {c.reason}"
        print(f"   {label[:40]:<40} {c.turns:>5} turns  {verdict}")
    cur = table.currency
    header = (f"{'tool':<24} {'calls':>6} {'window cost':>11} {'provider':>9} {'calibr.':>7} {'cached':>8} "
              f"{'cache known':>11} {cur + ' no cache':>13} {cur + ' cached':>11} {'cleared':>7}")  # fmt: skip
    print(f"\n{header}\n{'-' * len(header)}")
    for r in costs["tools"]:
        print(f"{r['tool'][:24]:<24} {r['calls']:>6,} {format_tokens(r['window_cost_tokens']):>11} "
              f"{format_tokens(r['provider_tokens']):>9} {_pct(r['calibrated_share']):>7} "
              f"{format_tokens(r['cached_tokens']):>8} {_pct(r['cache_known_share']):>11} "
              f"{r['cost_without_cache']:>13.4f} {r['cost_with_cache']:>11.4f} {r['cleared_calls']:>7,}")  # fmt: skip
    print(f"\nprices: taken {table.taken} ({table.source[:100]})")
    if costs["no_cache_figures"]:
        print(f"no cache figures from: {', '.join(costs['no_cache_figures'])}: {costs['no_cache_figures_why']}")
    if costs["unpriced_models"]:
        print(f"no price for: {', '.join(costs['unpriced_models'])} (add them with --prices or TOOLMETER_PRICES)")
    print("\ntool-result tokens per run:")
    for s in runs:
        print(f"   {s['service'][:30]:<30} {s['runs']:>6,} runs  p50 {format_tokens(s['result_tokens_p50']):>7}"
              f"  p99 {format_tokens(s['result_tokens_p99']):>7}  max {format_tokens(s['result_tokens_max']):>7}")  # fmt: skip
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from collector.query.export import export

    out = args.out or f"{args.table}.{'jsonl' if args.format == 'json' else args.format}"
    with read_connection(args.db) as con:
        n = export(con, args.table, args.format, out, _parse_since(args.since))
    print(f"{n:,} row(s) of {args.table} written to {out} ({args.format})")
    return 0
