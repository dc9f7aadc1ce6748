"""Shaping an MCP tool's ``CallToolResult``.

An MCP tool may answer twice over: ``structuredContent`` and, for older clients, the same
JSON serialised in a text block. Both reach a model only once (a client passes one or the
other), so the raw result is counted once: the structured content when there is some, else
the text blocks joined. The shaped result carries the view as its text block (and as its
structured content when the tool gave some: the envelope, the same JSON), the tool's other
blocks (images, embedded resources) unchanged, and a ``resource_link`` to the whole result
behind its handle. An error result is bounded like a document, never dropped.

Works on the wire form (a dict with ``content``, ``structuredContent``, ``isError``) and on
the MCP SDK's ``CallToolResult`` model (returned as the same model); it does not import the
SDK.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from collector.adapter.policy import Policy, Scope
from collector.adapter.shaping import Shaped, shape
from collector.agent.record import as_text, utf8_len

R = TypeVar("R")

URI_PREFIX = "toolmeter://result/"
"""The ``resource_link`` URI of a handle: ``toolmeter://result/tmh_...``."""


def _wire(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    dump = getattr(result, "model_dump", None)
    if dump is None:
        raise TypeError(f"expected a CallToolResult or its JSON form, got {type(result).__name__}")
    wire: dict[str, Any] = dump(by_alias=True, mode="json", exclude_none=True)
    return wire


def shape_call_result(result: R, policy: Policy, scope: Scope, *, tool_name: str | None = None,
                      **shape_args: Any) -> tuple[R, Shaped]:  # fmt: skip
    """``result`` bounded to ``policy`` (same type back: a dict, or the SDK's model), and what
    :func:`collector.adapter.shape` made of it (recorded on the current span, as ``shape`` does).

    ``shape_args`` are passed on to :func:`~collector.adapter.shape` (``store``, ``query``, ...).
    """
    wire = _wire(result)
    blocks = list(wire.get("content") or [])
    texts = [b for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text")]
    structured = wire.get("structuredContent")
    raw: Any = structured if structured is not None else "\n".join(str(b.get("text", "")) for b in texts)
    if wire.get("isError"):
        policy = replace(policy, shape="document")
    shaped = shape(raw, policy, scope, tool_name=tool_name, **shape_args)
    out: dict[str, Any] = {k: v for k, v in wire.items() if k not in ("content", "structuredContent")}
    content: list[Any] = [{"type": "text", "text": shaped.view}, *others]
    if shaped.handle is not None and shaped.truncated:
        content.append({
            "type": "resource_link", "uri": URI_PREFIX + shaped.handle,
            "name": f"{tool_name or 'tool'} result (whole)",
            "description": f"The whole result behind handle {shaped.handle}: read_result(handle, offset, limit) "
                           "or filter_result(handle, expr) return parts of it.",
            "mimeType": "application/json" if structured is not None or shaped.shape in ("list", "record")
            else "text/plain",
            "size": utf8_len(as_text(raw)),
        })  # fmt: skip
    out["content"] = content
    if structured is not None and shaped.envelope is not None:
        # the same JSON as the text block: a client passes one or the other to the model
        out["structuredContent"] = shaped.envelope
    if isinstance(result, dict):
        return out, shaped  # type: ignore[return-value]
    return type(result).model_validate(out), shaped  # type: ignore[attr-defined]
