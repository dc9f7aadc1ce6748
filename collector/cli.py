"""The ``toolmeter`` command line: its parser and entry point (commands in :mod:`collector.commands`
and :mod:`collector.services`).

Errors toolmeter raises on purpose become one line on stderr and exit code 2; ``ingest``
exits 1 when a file could not be read at all (the others are still loaded).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from collector import config as config_module
from collector.commands import (
    cmd_alerts,
    cmd_check,
    cmd_cost,
    cmd_doctor,
    cmd_export,
    cmd_ingest,
    cmd_lake_maintain,
    cmd_migrate,
    cmd_prune,
    cmd_top,
    cmd_whatif,
)
from collector.config import (
    DATA_PATH_ENV,
    DEFAULT_DEMO_DB,
    ENCODINGS,
    MAX_STORE_BYTES_ENV,
    RETAIN_ENV,
    RETAIN_PAYLOADS_ENV,
    STATE_DIR_ENV,
)
from collector.errors import ToolmeterError
from collector.query.ranking import RANK_METRICS
from collector.services import SAMPLE_TRACES, cmd_dashboard, cmd_demo, cmd_serve, cmd_watch


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


def _add_ingest(sub: Any, db_default: str) -> None:
    p = sub.add_parser(
        "ingest",
        help="load trace files into the store: OTLP/JSON (.json, .jsonl), OTLP protobuf (one request, or the "
        "Collector file exporter's length-prefixed ones), ConsoleSpanExporter output; gzip or zstd",
    )
    p.add_argument("files", nargs="+", help="files, globs or folders")
    _store_arguments(p, db_default)
    p.add_argument("--encoding", choices=ENCODINGS, default=None, help="tiktoken encoding (default o200k_base)")
    p.add_argument("--numbers-only", action="store_true", help="store figures only, no payloads")
    p.add_argument("--rules", default=None, help="alert rules (TOML) evaluated after loading (default rules)")
    p.add_argument("--no-alerts", action="store_true", help="do not evaluate alert rules after loading")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_ingest)


def _add_top(sub: Any, db_default: str) -> None:
    p = sub.add_parser("top", help="rank tools by the size of what they put into the window")
    _store_arguments(p, db_default)
    p.add_argument(
        "--by",
        choices=list(RANK_METRICS),
        default="view",
        help="sort by p99 view tokens (default), raw tokens, bytes, or window cost",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--exact", action="store_true", help="exact percentiles over every call, however many")
    which.add_argument(
        "--rollups", action="store_true",
        help="read rolled days from the daily rollups (percentiles within 1 %%); by default they are read "
        "when they stand for over a million calls",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_top)


def _add_doctor(sub: Any, db_default: str) -> None:
    p = sub.add_parser(
        "doctor", help="coverage: per service and dialect, how many tool calls had a raw, a view, a call id"
    )
    _store_arguments(p, db_default)
    p.add_argument("--json", action="store_true", help="print a JSON list (keys: see collector/query/coverage.py)")
    p.set_defaults(func=cmd_doctor)


def _add_serve(sub: Any, db_default: str) -> None:
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
    p.add_argument(
        "--measure-processes", type=int, default=None, metavar="N",
        help="worker processes measuring large batches (default: one per core, at most 4; 1: none)",
    )  # fmt: skip
    p.add_argument("--rules", default=None, help="alert rules (TOML), evaluated every --watch-interval seconds")
    p.add_argument("--webhook", default=None, help="POST new alerts here (or set TOOLMETER_WEBHOOK_URL)")
    p.add_argument("--watch-interval", type=float, default=300.0, help="seconds between alert evaluations")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve the tool metrics for Prometheus on --host:PORT/metrics (needs toolmeter[prometheus])")  # fmt: skip
    p.add_argument("--encoding", choices=ENCODINGS, default=None)
    p.add_argument(
        "--maintain-every", default=None, metavar="DURATION",
        help="on a DuckLake store, run `toolmeter lake maintain` this often (e.g. 1h); one host of a fleet is enough",
    )  # fmt: skip
    _retention_arguments(p)
    p.add_argument("--prune-every", default="1h", metavar="DURATION",
                   help="apply the retention this often, and at start and two minutes after (default: %(default)s)")  # fmt: skip
    p.add_argument("--no-compact", action="store_true",
                   help="do not rewrite the DuckDB file when it is worth it (freed space, calls in small row "
                        "groups); by default a retention run does when the requests coming in meanwhile fit in the queue")  # fmt: skip
    p.set_defaults(func=cmd_serve)


def _retention_arguments(p: Any) -> None:
    p.add_argument(
        "--retain",
        default=None,
        metavar="AGE",
        help=f"keep rows this long: 30d, 12h, forever (or {RETAIN_ENV}; default 30d)",
    )
    p.add_argument(
        "--retain-payloads",
        default=None,
        metavar="AGE",
        help=f"keep raw and view payloads this long (or {RETAIN_PAYLOADS_ENV}; default 7d)",
    )
    p.add_argument("--max-size", default=None, metavar="SIZE",
                   help=f"then remove the oldest payloads, then rows, beyond this size: 10GB, 2GiB "
                        f"(or {MAX_STORE_BYTES_ENV}; default none)")  # fmt: skip


def _add_prune(sub: Any, db_default: str) -> None:
    p = sub.add_parser("prune", help="remove rows and payloads older than the retention; print what went")
    _store_arguments(p, db_default)
    _retention_arguments(p)
    p.add_argument(
        "--no-compact",
        action="store_true",
        help="do not rewrite a DuckDB file (to give back freed space, or to put its calls in full row groups)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what a run would remove (rows by table, payload files, a rewrite); remove nothing",
    )
    p.set_defaults(func=cmd_prune)


def _add_lake(sub: Any, db_default: str) -> None:
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


def _add_migrate(sub: Any, db_default: str) -> None:
    p = sub.add_parser("migrate", help="copy a DuckDB file store into a DuckLake store")
    p.add_argument("--from", dest="source", required=True, metavar="FILE.duckdb", help="the store to copy")
    p.add_argument("--to", dest="db", required=True, metavar="LAKE", help="'ducklake:postgres:...' (created if new)")
    p.add_argument("--data-path", default=None, help=f"a new lake's data folder or s3://... (or {DATA_PATH_ENV})")
    p.add_argument("--state-dir", default=None, help=f"this host's state folder (or {STATE_DIR_ENV})")
    p.set_defaults(func=cmd_migrate)


def _add_alerts(sub: Any, db_default: str) -> None:
    p = sub.add_parser("alerts", help="list envelope-growth alerts")
    _store_arguments(p, db_default)
    p.add_argument("--since", default=None, help="changes since a date, time or age (7d, 24h)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--evaluate", action="store_true", help="evaluate the rules first")
    p.add_argument("--rules", default=None, help="rules file (TOML); default thresholds otherwise")
    p.add_argument("--ack", metavar="ALERT_ID", help="acknowledge an alert")
    p.add_argument("--resolve", metavar="ALERT_ID", help="resolve an alert")
    p.set_defaults(func=cmd_alerts)


def _add_watch(sub: Any, db_default: str) -> None:
    p = sub.add_parser("watch", help="evaluate alert rules periodically (and deliver to a webhook)")
    _store_arguments(p, db_default)
    p.add_argument("--rules", default=None)
    p.add_argument("--webhook", default=None, help="POST new alerts here (or set TOOLMETER_WEBHOOK_URL)")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between evaluations")
    p.add_argument("--once", action="store_true", help="evaluate once and exit")
    p.set_defaults(func=cmd_watch)


def _add_check(sub: Any, db_default: str) -> None:
    p = sub.add_parser("check", help="CI gate: compare a candidate run's tool envelopes with a baseline")
    p.add_argument("--baseline", required=True, help="a toolmeter store, or trace file(s) (a file or folder)")
    p.add_argument("--candidate", required=True, help="the same, for the run under test")
    p.add_argument("--rules", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)


def _add_dashboards(sub: Any, db_default: str) -> None:
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


def _add_whatif(sub: Any, db_default: str) -> None:
    p = sub.add_parser(
        "whatif", help="replay the stored raw results through per-tool budgets: tokens and window cost saved"
    )
    _store_arguments(p, db_default)
    p.add_argument("--budget", action="append", default=[], metavar="TOOL=TOKENS[:SHAPE[:STRATEGY]]",
                   help="a tool's budget (repeat per tool): search_orders=800, fetch_logs=2000:diagnostic, "
                   "get_page=3000:document:head")  # fmt: skip
    p.add_argument("--days", type=float, default=None, help="replay only the calls of the last N days (default: all)")
    p.add_argument("--keep-last", type=int, default=None,
                   help="also compact: a result re-read by more than K later LLM calls costs its stub after them")  # fmt: skip
    p.add_argument(
        "--share", type=float, default=0.05, help="for suggestions: the share of the window a tool's p99 may take"
    )
    p.add_argument("--window", type=int, default=128_000, help="for suggestions: the model's window in tokens")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_whatif)


def _add_cost(sub: Any, db_default: str) -> None:
    p = sub.add_parser("cost", help="window cost as billed: calibrated to each model's tokens, with the prompt "
                       "cache, in money; and tool-result tokens per run")  # fmt: skip
    _store_arguments(p, db_default)
    p.add_argument("--days", type=float, default=None, help="only the calls of the last N days (default: all)")
    p.add_argument("--prices", default=None, metavar="FILE",
                   help="a JSON price table (default: TOOLMETER_PRICES, else the shipped one)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_cost)


def _add_export(sub: Any, db_default: str) -> None:
    p = sub.add_parser("export", help="write tool_calls, llm_calls or the ranking as Parquet, CSV or JSON lines")
    _store_arguments(p, db_default)
    p.add_argument("--table", choices=("tool_calls", "llm_calls", "ranking"), default="tool_calls")
    p.add_argument("--format", choices=("parquet", "csv", "json"), default="parquet",
                   help="json: one object per line")  # fmt: skip
    p.add_argument("--since", default=None, help="rows from this date, time or age on (2026-11-16, 24h, 7d)")
    p.add_argument("--out", default=None, help="the file to write (default: TABLE.parquet, .csv or .jsonl here)")
    p.set_defaults(func=cmd_export)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolmeter", description="Measure what each tool call puts into an agent's context window."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    db_default = config_module.store_path()
    for add in (
        _add_ingest,
        _add_top,
        _add_doctor,
        _add_serve,
        _add_prune,
        _add_lake,
        _add_migrate,
        _add_alerts,
        _add_watch,
        _add_check,
        _add_whatif,
        _add_cost,
        _add_export,
        _add_dashboards,
    ):
        add(sub, db_default)
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
