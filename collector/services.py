"""The long-running commands: ``serve``, ``watch``, ``dashboard`` and ``demo``.

Each runs until stopped; SIGTERM and Ctrl+C stop it cleanly (children included), writing
what is queued first.
"""

import argparse
import contextlib
import faulthandler
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from collector import config as config_module
from collector.commands import expand_patterns, format_tokens, parse_duration, retention_of
from collector.config import CollectorConfig
from collector.errors import InputError, ToolmeterError
from collector.ingest import ingest_files
from collector.query.ranking import ranking
from collector.store.database import read_connection
from collector.store.lake import is_lake, redact
from collector.store.payloads import payload_dir

SAMPLE_TRACES = Path(__file__).resolve().parent.parent / "sample_traces"
DASHBOARD_APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


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
        env[config_module.DB_ENV] = db  # not on the command line: a catalog password would show in `ps`
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
    files = expand_patterns([str(traces)])
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
    from collector.alerts.evaluation import evaluate
    from collector.alerts.rules import Rules

    for alert in evaluate(args.db, Rules()):
        print(f"alert: {alert.summary}")
    with read_connection(args.db) as con:
        rows = ranking(con)
    for r in rows[:8]:
        print(
            f"  {r['tool']:<24} p99 view {format_tokens(r['view_tokens_p99']):>7} tokens, raw {format_tokens(r['raw_tokens_p99']):>7}"
        )
    print()
    if args.no_dashboard:
        return 0
    return _run_dashboard(args.db, args.port, args.host)


def _serve_metrics(host: str, port: int) -> None:
    """Serve the tool metrics (:mod:`collector.metrics`) for Prometheus to scrape on host:port/metrics."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server
    except ImportError as e:
        raise InputError("--metrics-port needs the Prometheus exporter: pip install 'toolmeter[prometheus]'") from e
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    start_http_server(port, addr=host)
    # the global provider: the receiver's pipeline records into it (collector.metrics)
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()],
                             resource=Resource.create({"service.name": "toolmeter-serve"}))  # fmt: skip
    metrics.set_meter_provider(provider)
    print(f"toolmeter metrics for Prometheus on http://{host}:{port}/metrics", flush=True)


SECOND_RETENTION_S = 120.0
"""``serve``'s second retention run comes this soon after the one at start: a rewrite of the file
(:meth:`Receiver.rewrite_when_light`) waits for a minute of the load to be seen."""
SIGNAL_CHECK_S = 0.25
"""How often ``serve``'s main thread wakes to run a signal handler another thread received."""
JOB_STOP_WAIT_S = 10.0
"""How long a stopping ``serve`` waits, once its queue is written, for the run under way of a
periodic job (the alert rules, retention, a rewrite, lake maintenance) to end."""


def cmd_serve(args: argparse.Namespace) -> int:
    from collector.alerts.rules import load_rules
    from collector.serve.receiver import ReceiverConfig, RunningReceiver

    load_rules(args.rules)  # a bad rules file stops us here, naming its line and key
    # a crash in native code (DuckDB, its extensions) prints every thread's Python stack to
    # stderr, the receiver's log, instead of ending the process without a word
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stderr with no file behind it
        faulthandler.enable()
        # and `kill -USR1` prints them on demand: what a receiver that does not stop is waiting on
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = CollectorConfig.resolve(db=args.db, encoding=args.encoding)
    rc = ReceiverConfig(
        host=args.host,
        port=args.port,
        grpc_port=None if args.grpc_port == 0 else args.grpc_port,
        token=config_module.receiver_token(args.token),
        max_body_bytes=config_module.max_body_bytes(args.max_body_bytes),
        spool_dir=args.spool,
        measure_processes=config_module.measure_processes(args.measure_processes),
    )
    if args.metrics_port is not None:
        _serve_metrics(args.host, args.metrics_port)
    # before the port opens: a supervisor may stop us as soon as its probe answers, and a
    # SIGTERM without this handler would end the process without writing what it holds
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    running = RunningReceiver(config, rc)
    running.receiver.start_background_work()
    jobs = _jobs(args, config, running.receiver, stop)
    for job in jobs:
        job.start()
    grpc_note = f", OTLP/gRPC on {rc.host}:{running.grpc_port}" if running.grpc_port else ""
    print(f"toolmeter receiving OTLP/HTTP on {running.url}{grpc_note}; store {redact(config.db)}", flush=True)
    print(f"point agents at it: OTEL_EXPORTER_OTLP_ENDPOINT={running.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        # a timed wait, never a bare one: the kernel may hand SIGTERM to any of our threads (DuckDB's,
        # the HTTP loop's), and Python runs the handler on the main thread only when it next runs
        # bytecode; blocked in an untimed wait it never would, and the receiver never stopped
        while not stop.wait(SIGNAL_CHECK_S):
            pass
    print("stopping: writing what is queued ...", flush=True)
    stop.set()
    return _stopped(running, jobs)


def _jobs(
    args: argparse.Namespace, config: CollectorConfig, receiver: Any, stop: threading.Event
) -> list[threading.Thread]:
    """``serve``'s periodic jobs, not started: alert rules, lake maintenance if asked, retention."""
    jobs = [threading.Thread(
        target=run_watch, name="toolmeter-watch", daemon=True,
        args=(config.db, args.rules, config_module.webhook_url(args.webhook), args.watch_interval, stop),
    )]  # fmt: skip
    if args.maintain_every:
        if not is_lake(config.db):
            raise InputError("--maintain-every is for DuckLake stores ('ducklake:...'); a DuckDB file needs none")
        from collector.store.maintenance import maintain

        jobs.append(threading.Thread(
            target=_periodically, name="toolmeter-lake-maintenance", daemon=True,
            args=("lake maintenance", lambda: maintain(config.db).lines()[:3], parse_duration(args.maintain_every),
                  stop, False),
        ))  # fmt: skip
    from collector.store.retention import prune

    retention = retention_of(args)

    def upkeep() -> list[str]:
        return prune(config.db, retention).lines() + ([] if args.no_compact else _rewrite(receiver))

    # at start too, and again soon after: a rewrite of the file waits until the load is known
    jobs.append(threading.Thread(
        target=_periodically, name="toolmeter-retention", daemon=True,
        args=("retention", upkeep, parse_duration(args.prune_every), stop, True, SECOND_RETENTION_S),
    ))  # fmt: skip
    return jobs


def _stopped(running: Any, jobs: list[threading.Thread]) -> int:
    """Write what is queued and stop the receiver, then let the jobs end their runs."""
    running.stop()
    busy = stop_jobs(jobs, JOB_STOP_WAIT_S)
    if busy:
        print(
            f"toolmeter: stopped without waiting longer for {', '.join(busy)} ({JOB_STOP_WAIT_S:.0f} s): what its run "
            "had not committed is not in the store, and is done again by its next run",
            file=sys.stderr,
            flush=True,
        )
        # not through the interpreter's shutdown: a thread still inside DuckDB then would be unwound
        # by pthread_exit through DuckDB's C++ frames when it next takes the GIL, which aborts the
        # process ("terminate called without an active exception", status 134). Ending here is what
        # a kill does, which the store survives: its transactions are atomic, and a rewrite's
        # unfinished file is removed by the next one
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    return 0


def stop_jobs(jobs: list[threading.Thread], wait_s: float) -> list[str]:
    """Wait up to ``wait_s`` seconds in all for the periodic jobs' threads, told to stop, to end
    (each after its run under way); returns the names of those still running."""
    deadline = time.monotonic() + wait_s
    for job in jobs:
        job.join(timeout=max(0.0, deadline - time.monotonic()))
    return [job.name.removeprefix("toolmeter-") for job in jobs if job.is_alive()]


def _rewrite(receiver: Any) -> list[str]:
    """The receiver's file rewritten if worth it and its load allows: what was done, as a line."""
    try:
        said = receiver.rewrite_when_light()
    except ToolmeterError as e:  # what was pruned is said all the same
        said = f"the file's rewrite failed (tried again at the next run): {e}"
    return [said] if said else []


def _periodically(
    label: str, job: Any, every_s: float, stop: threading.Event, first_now: bool, second_s: float | None = None
) -> None:
    """Run ``job`` (which returns lines to print) every ``every_s`` seconds until ``stop`` (the
    second time after ``second_s``, when given and sooner); a failure is printed and the job tried
    again at its next turn."""
    if not first_now and stop.wait(every_s):
        return
    wait_s = min(every_s, second_s) if second_s is not None else every_s
    while True:
        try:
            print(f"toolmeter {label}: " + "; ".join(job()), flush=True)
        except ToolmeterError as e:
            print(f"toolmeter {label} failed (will try again): {e}", file=sys.stderr, flush=True)
        except Exception as e:  # anything else too: a thread that ended here would never run the job again
            print(f"toolmeter {label} failed (will try again): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if stop.wait(wait_s):
            return
        wait_s = every_s


def run_watch(
    db: str, rules_path: str | None, webhook: str | None, interval: float, stop: threading.Event, once: bool = False
) -> bool:
    """Evaluate the rules (and deliver) every ``interval`` seconds until ``stop`` is set (which
    ends an evaluation under way too), or ``once``; returns whether the last evaluation ran."""
    from collector.alerts.evaluation import evaluate
    from collector.alerts.memo import Memo
    from collector.alerts.rules import load_rules

    rules = load_rules(rules_path)
    memo = Memo()  # the windows of one evaluation whose calls did not change, for the next
    while True:
        ran = False
        try:
            for alert in evaluate(db, rules, None if once else stop, memo):
                print(alert.summary, flush=True)
            if webhook:
                from collector.alerts.webhook import deliver_pending

                deliver_pending(db, webhook)
            ran = True
        except ToolmeterError as e:
            print(f"toolmeter watch: {e}", file=sys.stderr, flush=True)
        except Exception as e:  # anything else too: in serve, a thread that ended here would never watch again
            print(f"toolmeter watch failed (will try again): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if once or stop.wait(interval):
            return ran


def cmd_watch(args: argparse.Namespace) -> int:
    from collector.alerts.rules import load_rules

    load_rules(args.rules)  # a bad rules file fails now, with its line and key
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ran = True
    with contextlib.suppress(KeyboardInterrupt):
        ran = run_watch(args.db, args.rules, config_module.webhook_url(args.webhook), args.interval, stop, args.once)
    return 0 if ran or not args.once else 1  # a scheduled `--once` that could not evaluate fails
