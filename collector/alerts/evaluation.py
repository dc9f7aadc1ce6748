"""Evaluating the alert rules on a store, storing what they find, and the stored alerts.

:mod:`collector.alerts.detection` and :mod:`collector.alerts.runs` say what the rules find in
the calls; an evaluation reads them a tool and a service at a time (see :func:`evaluate`) and
keeps each alert once (its id is stable), with its state and delivery.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa

from collector.alerts.detection import Alert, detect, tools_of
from collector.alerts.memo import Memo, survey
from collector.alerts.rules import Rules
from collector.alerts.runs import detect_run_growth, services_of
from collector.errors import InputError, StoreError
from collector.query.runs import NO_SERVICE
from collector.store.connection import connect, let_writer_in, read_connection, rows_as_dicts
from collector.store.lake import is_lake
from collector.store.waiting import let_waiting_in


def _row(alert: Alert) -> list[Any]:
    first = alert.findings[0]
    evidence = {
        "rule_findings": [asdict(f) | {"ratio": f.ratio} for f in alert.findings],
        "before": asdict(alert.before),
        "after": asdict(alert.after),
        "schema": alert.schema,
        "examples": alert.examples,
        "tools_grew": alert.tools_grew,
    }
    return [alert.alert_id, alert.tool_name, alert.kind, alert.change_at, first.metric, first.before, first.after,
            first.ratio, alert.summary, json.dumps(evidence, default=str), alert.service]  # fmt: skip


_ALERT_SCHEMA = pa.schema([
    ("alert_id", pa.string()), ("tool_name", pa.string()), ("kind", pa.string()), ("change_at", pa.timestamp("us")),
    ("metric", pa.string()), ("before_value", pa.float64()), ("after_value", pa.float64()), ("ratio", pa.float64()),
    ("summary", pa.string()), ("evidence", pa.string()), ("service_name", pa.string()),
])  # fmt: skip
_ALERT_COLUMNS = tuple(_ALERT_SCHEMA.names)


def evaluate(db_path: str, rules: Rules, stop: threading.Event | None = None, memo: Memo | None = None) -> list[Alert]:
    """Detect alerts and store the new ones; returns the ones that were new.

    The store is read a tool (then a service) at a time, each in a read of its own: a writer of
    the same file (``serve``'s, in this process) gets in between them rather than waiting for the
    whole evaluation. ``stop`` set ends it between two of them and stores nothing: the next
    evaluation finds the same alerts (their ids are stable). ``memo``, kept from one evaluation
    to the next, spares reading again the windows whose calls did not change."""
    with read_connection(db_path) as con:
        if memo is None:
            tools, services = tools_of(con), services_of(con)
        else:  # the subjects, and every day's fingerprint the windows are kept by, in one pass
            surveyed = survey(con, NO_SERVICE)
            memo.start(surveyed)
            tools, services = surveyed.tools, surveyed.services
    subjects = [(detect, [tool]) for tool in tools] + [(detect_run_growth, [service]) for service in services]
    found: list[Alert] = []
    for find, subject in subjects:
        if stop is not None and stop.is_set():
            return []
        let_waiting_in(db_path)
        with read_connection(db_path) as con, _letting_writers_in(memo, con, db_path):
            found += find(con, rules, subject, memo)
    if memo is not None:
        memo.finish()
    return _store(db_path, found) if found else []


READ_TURN_S = 0.25
"""Within a subject's read, how long the file is read before a waiting writer is let in: each
turn costs the read a new attach (~20-40 ms at ten million calls, where it first reads the
row groups' bounds again), so letting one in before every window slowed an evaluation beside a
write every 50 ms several times over; a write waits this long at most, plus a window's read."""


@contextlib.contextmanager
def _letting_writers_in(memo: Memo | None, con: duckdb.DuckDBPyConnection, db_path: str) -> Iterator[None]:
    """Within a subject's read, a writer waiting for the file is let in before a window is read
    from the store, once the file has been read :data:`READ_TURN_S` (a subject's windows take
    seconds to read at ten million calls)."""
    if memo is None:
        yield
        return
    since = time.monotonic()

    def turn() -> None:
        nonlocal since
        if time.monotonic() - since >= READ_TURN_S and let_writer_in(con, db_path):
            since = time.monotonic()

    memo.before_read = turn
    try:
        yield
    finally:
        memo.before_read = None


def _store(db_path: str, found: list[Alert]) -> list[Alert]:
    """Store the alerts of ``found`` the store does not hold yet; returns them."""
    con = connect(db_path, read_only=False, wait_s=30)
    try:
        existing = {r[0] for r in con.execute("SELECT alert_id FROM alerts").fetchall()}
        new = [a for a in found if a.alert_id not in existing]
        if new:
            verb = "INSERT" if is_lake(db_path) else "INSERT OR IGNORE"  # a lake has no keys; `new` is new
            table = pa.table({name: [row[i] for row in map(_row, new)] for i, name in enumerate(_ALERT_COLUMNS)},
                             schema=_ALERT_SCHEMA)  # fmt: skip
            con.register("new_alerts", table)
            try:
                con.execute(
                    f"""{verb} INTO alerts ({", ".join(_ALERT_COLUMNS)}, state, detected_at, delivery_attempts)
                        SELECT *, 'open', now()::TIMESTAMP, 0 FROM new_alerts"""
                )
            finally:
                con.unregister("new_alerts")
        return new
    except duckdb.Error as e:
        raise StoreError(f"cannot store alerts in {db_path}: {e}") from e
    finally:
        con.close()


def list_alerts(db_path: str, since: datetime | None = None) -> list[dict[str, Any]]:
    """Stored alerts, newest change first."""
    with read_connection(db_path) as con:
        cur = con.execute(
            "SELECT * FROM alerts WHERE ? IS NULL OR change_at >= ? "
            "ORDER BY change_at DESC, tool_name, kind = 'run_growth', kind",
            [since, since],
        )
        rows = rows_as_dicts(cur)
    for row in rows:
        if isinstance(row.get("evidence"), str):
            row["evidence"] = json.loads(row["evidence"])
    return rows


def set_state(db_path: str, alert_id: str, state: str) -> None:
    """Acknowledge or resolve an alert."""
    if state not in ("open", "acknowledged", "resolved"):
        raise InputError(f"state={state!r}: use open, acknowledged or resolved")
    con = connect(db_path, read_only=False, wait_s=30)
    try:
        n = con.execute("UPDATE alerts SET state = ? WHERE alert_id = ?", [state, alert_id]).fetchone()
        if not n or not n[0]:
            raise InputError(f"no alert {alert_id!r} in {db_path}")
    finally:
        con.close()
