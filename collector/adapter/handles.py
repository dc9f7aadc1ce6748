"""Handles: the full result kept behind an id, read in slices by the run that made it.

Every shaping stores the whole payload (a list's items in the order shown, which is a
snapshot: later pages come from the same ordering, so they never overlap or skip) under a
random handle, with the :class:`Scope` that made it. :func:`read_result` pages through it
and :func:`filter_result` narrows it into a new handle; a handle asked for by another run
or principal is refused, as is an unknown one.

Two stores: :class:`MemoryHandles` (the default, for one process) and
:class:`DirectoryHandles` (a folder, for handles that outlive the process or are read by a
tool server in another one).
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from collector.adapter.policy import Scope
from collector.errors import InputError

MAX_PAGE_ITEMS = 200
"""The most items one :func:`read_result` returns, whatever ``limit`` asks for."""
MAX_PAGE_BYTES = 64 * 1024
"""The most bytes of text one :func:`read_result` returns."""

_HANDLE = re.compile(r"^tmh_[0-9a-f]{24}$")


class HandleError(PermissionError):
    """A handle that is unknown, or belongs to another run or principal."""


@dataclass(frozen=True)
class Stored:
    """What a handle holds: the items of a list (in the order shown) or the text of a result."""

    scope: Scope
    items: list[Any] | None = None
    text: str | None = None
    fields: tuple[str, ...] | None = None
    """The fields a page of items keeps unless the reader asks for others."""
    created: float = 0.0
    size: int = 0
    """Bytes of the result (its text, or the raw text its items came from), for the memory bound."""


class HandleStore(Protocol):
    def put(self, stored: Stored) -> str: ...

    def get(self, handle: str) -> Stored | None: ...


def new_handle(draw: Callable[[int], int] = secrets.randbelow) -> str:
    """``tmh_`` and 24 random decimal digits (about 80 bits; still hex digits, so the pattern is
    unchanged), drawn by ``draw(n)``, a number below ``n`` (a seeded ``Random.randrange`` gives
    the same handles every time, as the what-if replay needs).

    Tokenizers cut a run of digits in threes, so every handle costs the same tokens (11 in
    o200k_base). With hex digits a handle took from 11 to 25 tokens (20,000 draws), and a view
    that names its handle kept more or fewer fields near its budget depending on the draw."""
    return f"tmh_{draw(10**24):024d}"


DEFAULT_MEMORY_BYTES = 256 * 1024 * 1024
"""What :class:`MemoryHandles` holds at most by default; the oldest handles go first."""


class MemoryHandles:
    """Handles in this process's memory (they end with it), at most ``max_bytes`` of results:
    past it the oldest are forgotten, and reading one says it expired. A long-running agent's
    memory does not grow with every result it ever shaped."""

    def __init__(self, max_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[str, Stored] = {}  # in insertion order: the first is the oldest
        self._held = 0
        self.expired = 0
        """Handles forgotten to stay within ``max_bytes``."""
        self._lock = threading.Lock()

    def put(self, stored: Stored) -> str:
        handle = new_handle()
        with self._lock:
            self._entries[handle] = stored
            self._held += stored.size
            while self._held > self.max_bytes and len(self._entries) > 1:
                oldest = next(iter(self._entries))
                self._held -= self._entries.pop(oldest).size
                self.expired += 1
        return handle

    def get(self, handle: str) -> Stored | None:
        with self._lock:
            return self._entries.get(handle)


class DirectoryHandles:
    """Handles as JSON files in ``folder`` (created if missing)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def put(self, stored: Stored) -> str:
        handle = new_handle()
        doc = {"run_id": stored.scope.run_id, "principal": stored.scope.principal, "items": stored.items,
               "text": stored.text, "fields": stored.fields, "created": stored.created}  # fmt: skip
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        os.replace(tmp, self.folder / f"{handle}.json")  # readers never see half a file
        return handle

    def get(self, handle: str) -> Stored | None:
        if not _HANDLE.match(handle):
            return None
        try:
            doc = json.loads((self.folder / f"{handle}.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        fields = tuple(doc["fields"]) if doc.get("fields") is not None else None
        return Stored(Scope(doc["run_id"], doc["principal"]), doc.get("items"), doc.get("text"), fields,
                      doc.get("created", 0.0))  # fmt: skip


def keep(store: HandleStore, scope: Scope, *, items: list[Any] | None = None, text: str | None = None,
         fields: tuple[str, ...] | None = None, size: int | None = None) -> str:  # fmt: skip
    """Store a result's full payload (``size``: its bytes, when ``items`` came from a known text); returns its handle."""
    if size is None:
        size = len(text) if text is not None else len(json.dumps(items, ensure_ascii=False, default=str))
    return store.put(Stored(scope, items, text, fields, time.time(), size))


def _open(store: HandleStore, handle: Any, scope: Scope) -> Stored:
    if not isinstance(handle, str) or not _HANDLE.match(handle):
        raise HandleError(f"handle={handle!r} is not a result handle (they look like 'tmh_' and 24 hex digits)")
    stored = store.get(handle)
    if stored is None:
        raise HandleError(
            f"handle {handle} is unknown here: it expired (the store keeps a bounded amount), "
            "or was made by another store; call the tool again"
        )
    if stored.scope != scope:
        raise HandleError(f"handle {handle} belongs to another run or principal; "
                          "a handle is read only by the run that made it")  # fmt: skip
    return stored


def project(item: Any, fields: tuple[str, ...] | None) -> Any:
    if fields is None or not isinstance(item, dict):
        return item
    return {f: item[f] for f in fields if f in item}


def _check_window(offset: Any, limit: Any) -> None:
    for name, value in (("offset", offset), ("limit", limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{name}={value!r} must be a non-negative integer")


def read_result(store: HandleStore, handle: str, scope: Scope, offset: int = 0, limit: int = 20,
                fields: list[str] | tuple[str, ...] | None = None) -> dict[str, Any]:  # fmt: skip
    """A slice of the result behind ``handle``: items ``[offset, offset + limit)`` of a list
    (at most :data:`MAX_PAGE_ITEMS`), or bytes of a text (at most :data:`MAX_PAGE_BYTES`,
    widened to whole characters).

    Raises:
        HandleError: the handle is unknown or another run's.
        InputError: a negative or non-integer ``offset`` or ``limit``.
    """
    _check_window(offset, limit)
    stored = _open(store, handle, scope)
    if stored.items is not None:
        keep_fields = tuple(fields) if fields is not None else stored.fields
        limit = min(limit, MAX_PAGE_ITEMS)
        page = [project(item, keep_fields) for item in stored.items[offset : offset + limit]]
        end = offset + len(page)
        total = len(stored.items)
        return {"items": page, "offset": offset, "total": total, "handle": handle,
                "next": _next_read(handle, end, limit) if end < total else None}  # fmt: skip
    data = (stored.text or "").encode("utf-8", errors="surrogatepass")
    limit = min(limit, MAX_PAGE_BYTES)
    start = offset
    while 0 < start < len(data) and data[start] & 0xC0 == 0x80:  # back to the character's first byte
        start -= 1
    end = min(offset + limit, len(data))
    while end < len(data) and data[end] & 0xC0 == 0x80:
        end += 1
    return {"text": data[start:end].decode("utf-8", errors="replace"), "offset": start, "end": end,
            "total_bytes": len(data), "handle": handle,
            "next": _next_read(handle, end, limit) if end < len(data) else None}  # fmt: skip


def _next_read(handle: str, offset: int, limit: int) -> str:
    return f"read_result(handle='{handle}', offset={offset}, limit={limit})"


def filter_result(store: HandleStore, handle: str, scope: Scope, expr: str, limit: int = 20) -> dict[str, Any]:
    """The items of ``handle`` for which ``expr`` holds, kept behind a new handle of the same scope.

    ``expr`` compares fields with constants: ``status == 'refund_pending' and amount > 100``,
    ``region in ['north', 'south']``, ``not (customer.tier == 'gold')``. A missing field or a
    comparison of unlike types is false.

    Raises:
        HandleError: the handle is unknown or another run's.
        InputError: ``expr`` is not such an expression, or the handle holds text, not items.
    """
    _check_window(0, limit)
    stored = _open(store, handle, scope)
    if stored.items is None:
        raise InputError(f"handle {handle} holds text, not items: read it with read_result(offset, limit)")
    test = _compile(expr)
    matching = [item for item in stored.items if test(item)]
    narrowed = keep(store, scope, items=matching, fields=stored.fields)
    page = read_result(store, narrowed, scope, 0, limit)
    return {**page, "filter": expr, "truncated": len(matching) > len(page["items"])}


# --- filter expressions ------------------------------------------------------------------------

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_MISSING = object()


def _compile(expr: Any) -> Any:
    if not isinstance(expr, str) or not expr.strip():
        raise InputError(f"expr={expr!r} must be a filter such as \"status == 'refund_pending'\"")
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError as e:
        raise InputError(f"expr={expr!r} is not a filter expression: {e.msg}") from None
    _check(tree, expr)
    return lambda item: _truth(tree, item)


def _check(node: ast.AST, expr: str) -> None:
    allowed = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.Compare, ast.Name, ast.Attribute,
               ast.Constant, ast.List, ast.Tuple, ast.Load, ast.USub, *_COMPARE)  # fmt: skip
    for child in ast.walk(node):
        if not isinstance(child, allowed) or (isinstance(child, ast.UnaryOp)
                                              and not isinstance(child.op, (ast.Not, ast.USub))):  # fmt: skip
            raise InputError(f"expr={expr!r}: {type(child).__name__} is not allowed; use field comparisons "
                             "(==, !=, <, <=, >, >=, in, not in) joined by and, or, not")  # fmt: skip


def _value(node: ast.AST, item: Any) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, item) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _value(node.operand, item)
        return -inner if isinstance(inner, (int, float)) else _MISSING
    if isinstance(node, ast.Name):
        return item.get(node.id, _MISSING) if isinstance(item, dict) else _MISSING
    if isinstance(node, ast.Attribute):
        parent = _value(node.value, item)
        return parent.get(node.attr, _MISSING) if isinstance(parent, dict) else _MISSING
    return _truth(node, item)


def _truth(node: ast.AST, item: Any) -> bool:
    if isinstance(node, ast.BoolOp):
        parts = (_truth(v, item) for v in node.values)
        return all(parts) if isinstance(node.op, ast.And) else any(parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _truth(node.operand, item)
    if isinstance(node, ast.Compare):
        left = _value(node.left, item)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _value(right_node, item)
            if left is _MISSING or right is _MISSING:
                return False
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except TypeError:
                return False
            left = right
        return True
    value = _value(node, item)
    return value is not _MISSING and bool(value)
