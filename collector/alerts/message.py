"""The body of an alert as a webhook sends it: JSON any receiver reads, with Slack's ``text``.

Pure functions, no I/O: :func:`alert_payload` turns one ``alerts`` row into the body.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any


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


def alert_payload(row: dict[str, Any]) -> dict[str, Any]:
    """The JSON body for one ``alerts`` row (a dict of its columns). Pure.

    ``text`` is the summary escaped for Slack (or a line built from the tool and kind when
    there is none), ``alert`` every column but ``evidence`` with timestamps as ISO 8601 UTC
    strings and non-finite numbers as null, ``evidence`` the decoded evidence JSON.
    """
    summary = row.get("summary")
    if not summary:
        summary = f"toolmeter: {row.get('kind') or 'alert'} for tool {row.get('tool_name') or '?'}"
    alert = {k: _jsonable(v) for k, v in row.items() if k != "evidence"}
    return {
        "text": _slack_escape(str(summary)),
        "alert": alert,
        "evidence": _jsonable(_decode_evidence(row.get("evidence"))),
    }
