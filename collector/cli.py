"""The ``toolmeter`` command: ingest, top, doctor, dashboard, demo.

Errors toolmeter raises on purpose become one line on stderr and exit code 2; ``ingest``
exits 1 when a file could not be read at all (the others are still loaded).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from collector.config import CollectorConfig, env_bytes
from collector.errors import InputError, ToolmeterError
from collector.ingest import ingest_files
from collector.measure.tokens import ENCODINGS
from collector.query.ranking import RANK_METRICS, collector_totals, ranking
from collector.store.database import read_connection
from collector.store.lake import DATA_PATH_ENV, STATE_DIR_ENV, is_lake, redact
from collector.store.payloads import payload_dir

DEFAULT_DEMO_DB = "toolmeter-demo.duckdb"
SAMPLE_TRACES = Path(__file__).resolve().parent.parent / "sample_traces"
DASHBOARD_APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


def _fmt_tokens(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 100:.0f}%"


def _expand(patterns: list[str]) -> list[str]:
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
    paths = _expand(args.files)
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
        from collector.alerts.detection import evaluate
        from collector.alerts.rules import load_rules

        new = evaluate(config.db, load_rules(args.rules))
        for alert in new:
            print(f"alert: {alert.summary}")
        if new:
            print(f"{len(new)} new alert(s): `toolmeter alerts --db {redact(config.db)}` lists them")
    return 1 if summary.failed_files else 0


def cmd_top(args: argparse.Namespace) -> int:
    with read_connection(args.db) as con:
        rows = ranking(con, by=args.by)
        totals = collector_totals(con)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print(f"no tool calls in {redact(args.db)} yet")
        return 0
    header = f"{'tool':<24} {'calls':>6} {'view p50':>9} {'p95':>8} {'p99':>8} {'max':>8} {'raw p99':>8} {'trunc':>6} {'>budget':>7} {'window cost':>11}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['tool'][:24]:<24} {r['calls']:>6} {_fmt_tokens(r['view_tokens_p50']):>9} "
            f"{_fmt_tokens(r['view_tokens_p95']):>8} {_fmt_tokens(r['view_tokens_p99']):>8} "
            f"{_fmt_tokens(r['view_tokens_max']):>8} {_fmt_tokens(r['raw_tokens_p99']):>8} "
            f"{_pct(r['truncated_rate']):>6} {_pct(r['over_budget_rate']):>7} {_fmt_tokens(r['window_cost_tokens']):>11}"
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
        envelopes = f"{r['envelopes_removed']} (+{_fmt_tokens(r['wrapper_tokens'])})" if r["envelopes_removed"] else "0"
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


def _run_dashboard(db: str, port: int, host: str) -> int:
    # looked up, not imported: the collector never loads the dashboard's packages itself
    if importlib.util.find_spec("streamlit") is None or importlib.util.find_spec("plotly") is None:
        print(
            "toolmeter: the dashboard needs streamlit and plotly: pip install 'toolmeter[dashboard]'", file=sys.stderr
        )
        return 2
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(DASHBOARD_APP),
        "--server.address", host, "--server.port", str(port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer",
    ]  # fmt: skip
    env = dict(os.environ)
    if is_lake(db):
        env["TOOLMETER_DB"] = db  # not on the command line: a catalog password would show in `ps`
    else:
        cmd += ["--", "--db", os.path.abspath(db)]
    print(f"dashboard on http://{host}:{port}  (Ctrl+C to stop)", flush=True)
    proc = subprocess.Popen(cmd, env=env)
    # Streamlit runs as a child: a SIGTERM to toolmeter (a supervisor, a test, `kill`) must stop
    # it too, or the server stays behind holding the port and the store's file
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def cmd_dashboard(args: argparse.Namespace) -> int:
    return _run_dashboard(args.db, args.port, args.host)


def cmd_demo(args: argparse.Namespace) -> int:
    traces = Path(args.traces)
    if not traces.is_dir():
        print(f"toolmeter: {traces} is not a folder of trace files; pass --traces DIR", file=sys.stderr)
        return 2
    files = _expand([str(traces)])
    if not files:
        print(f"toolmeter: no sample traces in {traces}; pass --traces DIR", file=sys.stderr)
        return 2
    if not args.keep and not is_lake(args.db):
        for stale in (args.db, args.db + ".wal"):
            if os.path.exists(stale):
                os.remove(stale)
        shutil.rmtree(payload_dir(args.db), ignore_errors=True)
    config = CollectorConfig.resolve(db=args.db)
    print(f"loading {len(files)} sample trace file(s) into {redact(args.db)} ...", flush=True)
    summary = ingest_files(files, config)
    print(f"{summary.tool_calls} tool calls, {summary.llm_calls} LLM calls measured\n")
    from collector.alerts.detection import evaluate
    from collector.alerts.rules import Rules

    for alert in evaluate(args.db, Rules()):
        print(f"alert: {alert.summary}")
    with read_connection(args.db) as con:
        rows = ranking(con)
    for r in rows[:8]:
        print(
            f"  {r['tool']:<24} p99 view {_fmt_tokens(r['view_tokens_p99']):>7} tokens, raw {_fmt_tokens(r['raw_tokens_p99']):>7}"
        )
    print()
    if args.no_dashboard:
        return 0
    return _run_dashboard(args.db, args.port, args.host)


def cmd_serve(args: argparse.Namespace) -> int:
    from collector.alerts.rules import load_rules
    from collector.serve.receiver import (
        DEFAULT_MAX_BODY_BYTES,
        MAX_BODY_ENV,
        TOKEN_ENV,
        ReceiverConfig,
        RunningReceiver,
    )

    load_rules(args.rules)  # a bad rules file stops us here, naming its line and key
    config = CollectorConfig.resolve(db=args.db, encoding=args.encoding)
    rc = ReceiverConfig(
        host=args.host,
        port=args.port,
        grpc_port=None if args.grpc_port == 0 else args.grpc_port,
        token=args.token or os.environ.get(TOKEN_ENV) or None,
        max_body_bytes=args.max_body_bytes or env_bytes(MAX_BODY_ENV, DEFAULT_MAX_BODY_BYTES),
        spool_dir=args.spool,
    )
    running = RunningReceiver(config, rc)
    stop = threading.Event()
    watcher = threading.Thread(
        target=run_watch,
        args=(
            config.db,
            args.rules,
            args.webhook or os.environ.get("TOOLMETER_WEBHOOK_URL"),
            args.watch_interval,
            stop,
        ),
        name="toolmeter-watch",
        daemon=True,
    )
    watcher.start()
    if args.maintain_every:
        if not is_lake(config.db):
            raise InputError("--maintain-every is for DuckLake stores ('ducklake:...'); a DuckDB file needs none")
        threading.Thread(
            target=_maintain_periodically, args=(config.db, _parse_duration(args.maintain_every), stop),
            name="toolmeter-lake-maintenance", daemon=True,
        ).start()  # fmt: skip
    grpc_note = f", OTLP/gRPC on {rc.host}:{running.grpc_port}" if running.grpc_port else ""
    print(f"toolmeter receiving OTLP/HTTP on {running.url}{grpc_note}; store {redact(config.db)}", flush=True)
    print(f"point agents at it: OTEL_EXPORTER_OTLP_ENDPOINT={running.url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    print("stopping: writing what is queued ...", flush=True)
    stop.set()
    running.stop()
    watcher.join(timeout=30)
    return 0


def cmd_lake_maintain(args: argparse.Namespace) -> int:
    from collector.store.maintenance import maintain

    summary = maintain(args.db, snapshots_older_than=timedelta(seconds=_parse_duration(args.keep_snapshots)))
    print(f"maintained {redact(args.db)}:")
    for line in summary.lines():
        print(f"  {line}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from collector.store.maintenance import migrate

    copied = migrate(args.source, args.db, progress=lambda m: print(f"  {m}", flush=True))
    print(f"migrated {args.source} into {redact(args.db)}: {sum(copied.values()):,} row(s)")
    return 0


def _parse_duration(text: str) -> float:
    """'90s', '15m', '1h', '7d' or plain seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise InputError(f"duration {text!r}: use seconds, or a number with s, m, h or d (e.g. 1h)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _maintain_periodically(db: str, every_s: float, stop: threading.Event) -> None:
    from collector.store.maintenance import maintain

    while not stop.wait(every_s):
        try:
            summary = maintain(db)
            print("toolmeter lake maintenance: " + "; ".join(summary.lines()[:3]), flush=True)
        except ToolmeterError as e:
            print(f"toolmeter lake maintenance failed (will try again): {e}", file=sys.stderr, flush=True)


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
    from collector.alerts.detection import evaluate, list_alerts, set_state
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


def run_watch(db: str, rules_path: str | None, webhook: str | None, interval: float, stop: threading.Event) -> None:
    """Evaluate the rules (and deliver) every ``interval`` seconds until ``stop`` is set."""
    from collector.alerts.detection import evaluate
    from collector.alerts.rules import load_rules

    rules = load_rules(rules_path)
    while True:
        try:
            for alert in evaluate(db, rules):
                print(alert.summary, flush=True)
            if webhook:
                from collector.alerts.webhook import deliver_pending

                deliver_pending(db, webhook)
        except ToolmeterError as e:
            print(f"toolmeter watch: {e}", file=sys.stderr, flush=True)
        if stop.wait(interval):
            return


def cmd_watch(args: argparse.Namespace) -> int:
    from collector.alerts.rules import load_rules

    load_rules(args.rules)  # a bad rules file fails now, with its line and key
    stop = threading.Event()
    if args.once:
        stop.set()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        run_watch(args.db, args.rules, args.webhook or os.environ.get("TOOLMETER_WEBHOOK_URL"), args.interval, stop)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import tempfile

    from collector.alerts.detection import check, store_for
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


def _store_arguments(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--db", "--store", dest="db", default=default,
        help="the store: a DuckDB file, or a DuckLake such as 'ducklake:postgres:dbname=toolmeter host=HOST "
        "user=toolmeter password=...' (default: %(default)s; or set TOOLMETER_DB)",
    )  # fmt: skip
    p.add_argument(
        "--data-path", default=None,
        help=f"where a new DuckLake keeps its Parquet files: a shared folder or s3://... (or set {DATA_PATH_ENV})",
    )  # fmt: skip
    p.add_argument(
        "--state-dir", default=None,
        help=f"this host's own toolmeter state: DuckDB extensions, a lake receiver's spool (or set {STATE_DIR_ENV}; "
        "default .toolmeter)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolmeter", description="Measure what each tool call puts into an agent's context window."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    db_default = os.environ.get("TOOLMETER_DB", "toolmeter.duckdb")

    p = sub.add_parser("ingest", help="load OTLP/JSON trace files (.json, .jsonl, .gz) into the store")
    p.add_argument("files", nargs="+", help="files, globs or folders")
    _store_arguments(p, db_default)
    p.add_argument("--encoding", choices=ENCODINGS, default=None, help="tiktoken encoding (default o200k_base)")
    p.add_argument("--numbers-only", action="store_true", help="store figures only, no payloads")
    p.add_argument("--rules", default=None, help="alert rules (TOML) evaluated after loading (default rules)")
    p.add_argument("--no-alerts", action="store_true", help="do not evaluate alert rules after loading")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("top", help="rank tools by the size of what they put into the window")
    _store_arguments(p, db_default)
    p.add_argument(
        "--by",
        choices=list(RANK_METRICS),
        default="view",
        help="sort by p99 view tokens (default), raw tokens, bytes, or window cost",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_top)

    p = sub.add_parser(
        "doctor", help="coverage: per service and dialect, how many tool calls had a raw, a view, a call id"
    )
    _store_arguments(p, db_default)
    p.add_argument("--json", action="store_true", help="print a JSON list (keys: see collector/query/coverage.py)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("serve", help="receive OTLP traces and logs (HTTP and gRPC) from agents in any language")
    _store_arguments(p, db_default)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=4318, help="OTLP/HTTP port (default: %(default)s)")
    p.add_argument(
        "--grpc-port", type=int, default=4317, help="OTLP/gRPC port; 0 turns gRPC off (default: %(default)s)"
    )
    p.add_argument(
        "--token", default=None, help="require 'Authorization: Bearer TOKEN' (or set TOOLMETER_RECEIVER_TOKEN)"
    )
    p.add_argument("--max-body-bytes", type=int, default=None, help="largest request accepted (default 64 MiB)")
    p.add_argument("--spool", default=None, help="spool folder (default: <db>.spool)")
    p.add_argument("--rules", default=None, help="alert rules (TOML), evaluated every --watch-interval seconds")
    p.add_argument("--webhook", default=None, help="POST new alerts here (or set TOOLMETER_WEBHOOK_URL)")
    p.add_argument("--watch-interval", type=float, default=300.0, help="seconds between alert evaluations")
    p.add_argument("--encoding", choices=ENCODINGS, default=None)
    p.add_argument(
        "--maintain-every", default=None, metavar="DURATION",
        help="on a DuckLake store, run `toolmeter lake maintain` this often (e.g. 1h); one host of a fleet is enough",
    )  # fmt: skip
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("lake", help="look after a DuckLake store")
    lake_sub = p.add_subparsers(dest="lake_command", required=True)
    p = lake_sub.add_parser(
        "maintain", help="flush inlined rows, merge small files, expire old snapshots, delete unused files"
    )
    _store_arguments(p, db_default)
    p.add_argument(
        "--keep-snapshots", default="1h", metavar="DURATION",
        help="keep snapshots younger than this, and their files (default: %(default)s)",
    )  # fmt: skip
    p.set_defaults(func=cmd_lake_maintain)

    p = sub.add_parser("migrate", help="copy a DuckDB file store into a DuckLake store")
    p.add_argument("--from", dest="source", required=True, metavar="FILE.duckdb", help="the store to copy")
    p.add_argument("--to", dest="db", required=True, metavar="LAKE", help="'ducklake:postgres:...' (created if new)")
    p.add_argument("--data-path", default=None, help=f"a new lake's data folder or s3://... (or {DATA_PATH_ENV})")
    p.add_argument("--state-dir", default=None, help=f"this host's state folder (or {STATE_DIR_ENV})")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("alerts", help="list envelope-growth alerts")
    _store_arguments(p, db_default)
    p.add_argument("--since", default=None, help="changes since a date, time or age (7d, 24h)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--evaluate", action="store_true", help="evaluate the rules first")
    p.add_argument("--rules", default=None, help="rules file (TOML); default thresholds otherwise")
    p.add_argument("--ack", metavar="ALERT_ID", help="acknowledge an alert")
    p.add_argument("--resolve", metavar="ALERT_ID", help="resolve an alert")
    p.set_defaults(func=cmd_alerts)

    p = sub.add_parser("watch", help="evaluate alert rules periodically (and deliver to a webhook)")
    _store_arguments(p, db_default)
    p.add_argument("--rules", default=None)
    p.add_argument("--webhook", default=None, help="POST new alerts here (or set TOOLMETER_WEBHOOK_URL)")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between evaluations")
    p.add_argument("--once", action="store_true", help="evaluate once and exit")
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("check", help="CI gate: compare a candidate run's tool envelopes with a baseline")
    p.add_argument("--baseline", required=True, help="a toolmeter store, or trace file(s) (a file or folder)")
    p.add_argument("--candidate", required=True, help="the same, for the run under test")
    p.add_argument("--rules", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)

    for name, func, help_text in (
        ("dashboard", cmd_dashboard, "open the dashboard on a store"),
        ("demo", cmd_demo, "load the sample traces and open the dashboard"),
    ):
        p = sub.add_parser(name, help=help_text)
        _store_arguments(p, DEFAULT_DEMO_DB if name == "demo" else db_default)
        p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
        p.add_argument("--port", type=int, default=8501)
        if name == "demo":
            p.add_argument("--traces", default=str(SAMPLE_TRACES), help="folder of sample traces")
            p.add_argument("--keep", action="store_true", help="keep an existing demo store instead of rebuilding it")
            p.add_argument("--no-dashboard", action="store_true", help="load and print, do not start the dashboard")
        p.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # a lake's data path and state folder reach every part (and the dashboard's process) this way
    if getattr(args, "data_path", None):
        os.environ[DATA_PATH_ENV] = args.data_path
    if getattr(args, "state_dir", None):
        os.environ[STATE_DIR_ENV] = args.state_dir
    try:
        return int(args.func(args))
    except ToolmeterError as e:
        print(f"toolmeter: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `toolmeter top --json | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
