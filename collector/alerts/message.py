"""The body of an alert as a webhook sends it: JSON any receiver reads, with Slack's ``text``.

Pure functions, no I/O: :func:`alert_payload` turns one ``alerts`` row into the body.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any
from urllib.parse import urlencode


def _iso(value: dt.datetime | dt.date) -> str:
    if isinstance(value, dt.datetime):
        # the store keeps naive UTC timestamps
        value = value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    return value.isoformat()


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return _iso(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn gives &, < and > a meaning; everything else is shown as is
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _decode_evidence(evidence: Any) -> Any:
    if evidence is None or not isinstance(evidence, str | bytes):
        return evidence
    try:
        return json.loads(evidence)
    except ValueError:
        return evidence  # not JSON after all: send the text rather than nothing


def dashboard_link(base: str, page: str, **params: str | None) -> str:
    """A link to a dashboard page (its url path: ``tool``, ``replay``, ``eaters``) with the query
    parameters the dashboard reads (``dashboard.links``: ``from``, ``to``, ``service``, ``tool``,
    ``trace``, ``span``, ...)."""
    given = {k: v for k, v in params.items() if v}
    return f"{base.rstrip('/')}/{page}" + (f"?{urlencode(given)}" if given else "")


def _day(iso: Any, before: bool = False) -> str | None:
    """The day of a window bound (its end is exclusive: the last day is the one before)."""
    try:
        moment = dt.datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    return (moment - dt.timedelta(days=1) if before else moment).date().isoformat()


def alert_links(row: dict[str, Any], evidence: Any, base: str) -> dict[str, Any]:
    """Where the alert is seen on the dashboard at ``base``: the tool's page (a run alert: the
    service's window eaters) over both windows, and each example in the replay."""
    ev = evidence if isinstance(evidence, dict) else {}
    span = {"from": _day((ev.get("before") or {}).get("start")), "to": _day((ev.get("after") or {}).get("end"), True)}
    if row.get("kind") == "run_growth":
        view = dashboard_link(base, "eaters", service=row.get("service_name"), **span)
    else:
        view = dashboard_link(base, "tool", tool=row.get("tool_name"), **span)
    examples = [dashboard_link(base, "replay", trace=ex.get("trace_id"), span=ex.get("span_id"))
                for side in ("before", "after") for ex in (ev.get("examples") or {}).get(side, [])
                if isinstance(ex, dict)]  # fmt: skip
    return {"view": view, "examples": examples}


def alert_payload(row: dict[str, Any], dashboard_url: str | None = None) -> dict[str, Any]:
    """The JSON body for one ``alerts`` row (a dict of its columns). Pure.

    ``text`` is the summary escaped for Slack (or a line built from the tool and kind when
    there is none), ``alert`` every column but ``evidence`` with timestamps as ISO 8601 UTC
    strings and non-finite numbers as null, ``evidence`` the decoded evidence JSON. With
    ``dashboard_url``, ``links`` holds the dashboard's view of the alert and of each example
    call (:func:`alert_links`), and the text ends with a link to the view.
    """
    summary = row.get("summary")
    if not summary:
        summary = f"toolmeter: {row.get('kind') or 'alert'} for tool {row.get('tool_name') or '?'}"
    alert = {k: _jsonable(v) for k, v in row.items() if k != "evidence"}
    evidence = _jsonable(_decode_evidence(row.get("evidence")))
    text = _slack_escape(str(summary))
    body: dict[str, Any] = {"text": text, "alert": alert, "evidence": evidence}
    if dashboard_url:
        links = alert_links(row, evidence, dashboard_url)
        body["links"] = links
        body["text"] = f"{text} <{links['view']}|open in toolmeter>"
    return body
