"""Webhook delivery of alerts: one JSON POST per open alert, at most once.

What is sent
    For every alert in the store's ``alerts`` table that is ``open``, not yet delivered
    (``delivered_at IS NULL``) and has failed fewer than ``max_attempts`` times,
    :func:`deliver_pending` POSTs ``Content-Type: application/json``::

        {"text": "<the summary, escaped for Slack>",
         "alert": {every column of the row except evidence; timestamps as ISO 8601 UTC},
         "evidence": <the evidence JSON, decoded>}

    ``text`` makes the body a valid Slack incoming-webhook message; other receivers read
    ``alert`` and ``evidence``. Non-finite numbers (an infinite ``ratio``) are sent as
    ``null`` so the body stays strict JSON. Redirects are not followed (urllib would
    turn the POST into a body-less GET): a 3xx is a failure that asks for the final URL.

At most once, and its limit
    As soon as a 2xx answer arrives, the alert's ``delivered_at`` is set in its own short
    write, before anything else is sent, and an alert with ``delivered_at`` set is never
    sent again. Two gaps remain, and an alert can then arrive twice:

    * the process dies (or the store stays locked past its wait) between the 2xx and
      that write: the alert is still pending and the next run sends it again. The
      window is one DuckDB open-update-close (tens of milliseconds);
    * a request times out or the connection drops after the body went out: the
      receiver may have taken the alert without its 2xx reaching us, and the retry
      sends it again. No sender can close this one.

    Every request carries an ``X-Toolmeter-Alert-Id`` header so a receiver can drop
    such a repeat. Two delivery runs on the same store could also both send an alert;
    a run therefore takes an exclusive lock file (``<store>.webhook.lock``, POSIX only),
    and a second run that finds it held sends nothing and says so in its report.

Retries
    Connection errors, timeouts, 429 and 5xx are retried within the same call after
    ``backoff_s``, ``2 * backoff_s``, ``4 * backoff_s``, ... seconds (at most 60), or after
    the ``Retry-After`` the server gave (seconds or an HTTP date, capped at 60 s). Any
    other answer (a 4xx but 429, a 3xx) is a permanent failure: the alert is not retried
    in this run. Every failed attempt increments ``delivery_attempts``, sets
    ``delivery_error`` to one line (status code and the first 200 characters of the
    answer, or the exception) and logs a warning on the ``toolmeter`` logger. Attempts
    count across runs: an alert that has failed ``max_attempts`` times is given up and
    no run sends it again (reset ``delivery_attempts`` to retry it). An alert whose last
    failure was permanent is tried once more by the next run, until it, too, reaches
    ``max_attempts`` (the URL may have been fixed in between).

The store file is held only for the short reads and updates (open, query, close), never
during an HTTP request, so the collector and the dashboard can use it in between. Against
a dead endpoint each alert can cost up to ``backoff_s * (2**(max_attempts-1) - 1)`` seconds
of waits plus ``max_attempts * timeout_s`` of timeouts, in one run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import http.client
import json
import logging
import math
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from collector import config as config_module
from collector.alerts.message import alert_payload
from collector.errors import ConfigError, StoreError
from collector.store.connection import connect, rows_as_dicts
from collector.store.lake import LakeSpec, is_lake
from collector.store.waiting import LOCK_RETRY_SECONDS

logger = logging.getLogger("toolmeter")

MAX_DELAY_S = 60.0
"""The longest wait between two attempts, whether from the backoff or from Retry-After."""

BODY_EXCERPT_CHARS = 200
"""How much of a failed answer's body goes into ``delivery_error``."""

_MAX_RESPONSE_BYTES = 64 * 1024


@dataclass(frozen=True)
class DeliveryReport:
    """What one :func:`deliver_pending` run did.

    ``delivered``: alerts that got a 2xx. ``failed``: alerts attempted and not delivered
    (including those given up). ``given_up``: alerts whose failures reached
    ``max_attempts`` in this run. ``errors``: one line per failed attempt, alert id first.
    """

    delivered: int = 0
    failed: int = 0
    given_up: int = 0
    errors: list[str] = field(default_factory=list)


# --- HTTP --------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would re-send a POST as a GET without the body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass(frozen=True)
class _Attempt:
    ok: bool
    retryable: bool = False
    error: str = ""
    retry_after: float | None = None


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta seconds or an HTTP date), capped."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_DELAY_S)


def _post(url: str, body: bytes, alert_id: str, timeout_s: float) -> _Attempt:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "toolmeter",
            "X-Toolmeter-Alert-Id": alert_id,
        },
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            with contextlib.suppress(OSError):
                response.read(_MAX_RESPONSE_BYTES)
            status = response.status
    except urllib.error.HTTPError as e:
        try:
            try:
                text = e.read(_MAX_RESPONSE_BYTES).decode("utf-8", errors="replace")
            except OSError:
                text = ""
            excerpt = _one_line(text)[:BODY_EXCERPT_CHARS]
            message = f"HTTP {e.code} {_one_line(str(e.reason or ''))}".rstrip()
            if 300 <= e.code < 400:
                location = e.headers.get("Location") if e.headers is not None else None
                message += f" (redirect to {location or 'elsewhere'} not followed: configure the final URL)"
            if excerpt:
                message += f": {excerpt}"
            retryable = e.code == 429 or e.code >= 500
            after = _retry_after(e.headers.get("Retry-After") if e.headers is not None else None, time.time())
            return _Attempt(False, retryable, message, after if retryable else None)
        finally:
            e.close()
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, TimeoutError):
            return _Attempt(False, True, f"no answer within {timeout_s:g} s (timed out)")
        if isinstance(reason, ssl.SSLCertVerificationError):
            return _Attempt(False, False, f"TLS certificate rejected: {_one_line(str(reason))}")
        return _Attempt(False, True, f"cannot connect: {_one_line(str(reason))}")
    except TimeoutError:
        return _Attempt(False, True, f"no answer within {timeout_s:g} s (timed out)")
    except (OSError, http.client.HTTPException) as e:  # reset, remote disconnected, bad status line
        return _Attempt(False, True, f"connection failed: {type(e).__name__}: {_one_line(str(e))}")
    if 200 <= status < 300:
        return _Attempt(True)
    # urllib raises HTTPError for everything but 2xx; keep a clear message if it ever does not
    return _Attempt(False, False, f"HTTP {status}: unexpected answer")


# --- the store ---------------------------------------------------------------------------


def _open(db_path: str) -> duckdb.DuckDBPyConnection:
    return connect(db_path, read_only=False, wait_s=LOCK_RETRY_SECONDS)


def _pending(db_path: str, max_attempts: int) -> list[dict[str, Any]]:
    con = _open(db_path)
    try:
        has_table = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'alerts'").fetchone()
        if not has_table or not has_table[0]:
            return []
        cur = con.execute(
            """SELECT * FROM alerts
               WHERE delivered_at IS NULL AND state = 'open' AND coalesce(delivery_attempts, 0) < ?
               ORDER BY detected_at NULLS LAST, alert_id""",
            [max_attempts],
        )
        return rows_as_dicts(cur)
    except duckdb.Error as e:
        raise StoreError(f"cannot read alerts from the toolmeter store {db_path}: {e}") from e
    finally:
        con.close()


def _still_pending(db_path: str, alert_id: str) -> bool:
    """Re-read one alert just before sending it: it may have been closed or sent meanwhile."""
    con = _open(db_path)
    try:
        row = con.execute("SELECT state, delivered_at FROM alerts WHERE alert_id = ?", [alert_id]).fetchone()
    except duckdb.Error as e:
        raise StoreError(f"cannot read alerts from the toolmeter store {db_path}: {e}") from e
    finally:
        con.close()
    return row is not None and row[0] == "open" and row[1] is None


def _mark_delivered(db_path: str, alert_id: str) -> None:
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    con = _open(db_path)
    try:
        con.execute("UPDATE alerts SET delivered_at = ?, delivery_error = NULL WHERE alert_id = ?", [now, alert_id])
    except duckdb.Error as e:
        raise StoreError(f"cannot write to the toolmeter store {db_path}: {e}") from e
    finally:
        con.close()


def _record_failure(db_path: str, alert_id: str, error: str) -> tuple[int, bool] | None:
    """Count one failed attempt; (attempts so far, still open and undelivered), None if gone."""
    con = _open(db_path)
    try:
        row = con.execute(
            """UPDATE alerts SET delivery_attempts = coalesce(delivery_attempts, 0) + 1, delivery_error = ?
               WHERE alert_id = ?
               RETURNING delivery_attempts, state, delivered_at""",
            [error, alert_id],
        ).fetchone()
    except duckdb.Error as e:
        raise StoreError(f"cannot write to the toolmeter store {db_path}: {e}") from e
    finally:
        con.close()
    if row is None:
        return None
    return int(row[0]), row[1] == "open" and row[2] is None


def _lock_path(db_path: str) -> str:
    if is_lake(db_path):
        # a lake is shared by hosts: the lock is this host's (run alert delivery on one host)
        state = LakeSpec.parse(db_path).state_dir
        state.mkdir(parents=True, exist_ok=True)
        return str(state / "webhook.lock")
    return db_path + ".webhook.lock"


@contextlib.contextmanager
def _delivery_lock(db_path: str) -> Iterator[bool]:
    """Hold ``<store>.webhook.lock`` for the run; False when another run holds it."""
    if sys.platform == "win32":  # no flock: one deliverer at a time is then up to the caller
        yield True
        return
    import fcntl

    with open(_lock_path(db_path), "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# --- delivery ----------------------------------------------------------------------------


def _validate(url: str, max_attempts: int, backoff_s: float, timeout_s: float) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"the alert webhook URL must be an http:// or https:// URL with a host, not {url!r}")
    if max_attempts < 1:
        raise ConfigError(f"max_attempts must be 1 or more, not {max_attempts}")
    if not backoff_s >= 0:
        raise ConfigError(f"backoff_s must be 0 or more seconds, not {backoff_s}")
    if not timeout_s > 0:
        raise ConfigError(f"timeout_s must be more than 0 seconds, not {timeout_s}")
    # only the host appears in logs and errors: webhook URLs (Slack's) carry a secret in the path
    return parts.hostname + (f":{parts.port}" if parts.port else "")


def deliver_pending(
    db_path: str,
    url: str,
    *,
    max_attempts: int = 5,
    backoff_s: float = 1.0,
    timeout_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
) -> DeliveryReport:
    """POST every open, undelivered alert with fewer than ``max_attempts`` failures to ``url``.

    See the module docstring for the body, the at-most-once guarantee and the retries.

    Raises:
        ConfigError: ``url`` is not an http(s) URL, or a setting is out of range.
        StoreError: the store is missing, or could not be read or written (a 2xx that
            could not be recorded is logged first: that alert may be sent again).
    """
    host = _validate(url, max_attempts, backoff_s, timeout_s)
    db_path = os.fspath(db_path)
    if not is_lake(db_path) and not os.path.exists(db_path):
        raise StoreError(f"no toolmeter store at {db_path}: there are no alerts to deliver")
    with _delivery_lock(db_path) as mine:
        if not mine:
            message = (
                f"another alert delivery run holds {_lock_path(db_path)}; nothing sent by this one "
                "(two runs at once could send an alert twice)"
            )
            logger.warning("toolmeter webhook: %s", message)
            return DeliveryReport(errors=[message])
        return _deliver(db_path, url, host, max_attempts, backoff_s, timeout_s, sleep)


def _deliver(
    db_path: str,
    url: str,
    host: str,
    max_attempts: int,
    backoff_s: float,
    timeout_s: float,
    sleep: Callable[[float], None],
) -> DeliveryReport:
    delivered = failed = given_up = 0
    errors: list[str] = []
    for row in _pending(db_path, max_attempts):
        alert_id = str(row["alert_id"])
        if not _still_pending(db_path, alert_id):
            continue
        body = json.dumps(alert_payload(row, config_module.dashboard_url()), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")  # fmt: skip
        retry = 0
        while True:
            attempt = _post(url, body, alert_id, timeout_s)
            if attempt.ok:
                try:
                    _mark_delivered(db_path, alert_id)
                except StoreError:
                    logger.error(
                        "toolmeter webhook: alert %s was delivered to %s but could not be marked as delivered; "
                        "the next run will send it again",
                        alert_id,
                        host,
                    )
                    raise
                delivered += 1
                break
            errors.append(f"{alert_id}: {attempt.error}")
            recorded = _record_failure(db_path, alert_id, attempt.error)
            attempts, still_open = recorded if recorded else (max_attempts, False)
            logger.warning(
                "toolmeter webhook: delivering alert %s (%s) to %s failed, attempt %d of %d: %s",
                alert_id,
                row.get("tool_name"),
                host,
                attempts,
                max_attempts,
                attempt.error,
            )
            if attempts >= max_attempts:
                if recorded is not None:
                    given_up += 1
                    logger.warning(
                        "toolmeter webhook: giving up on alert %s after %d failed attempts; last error: %s",
                        alert_id,
                        attempts,
                        attempt.error,
                    )
                failed += 1
                break
            if not attempt.retryable or not still_open:
                failed += 1
                break
            delay = attempt.retry_after
            if delay is None:
                delay = min(backoff_s * 2**retry, MAX_DELAY_S)
            sleep(delay)
            retry += 1
    return DeliveryReport(delivered=delivered, failed=failed, given_up=given_up, errors=errors)
