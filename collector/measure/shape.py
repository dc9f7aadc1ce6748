"""Shape and schema: what kind of result a payload is, and a fingerprint of a JSON result's structure.

A shape is one of list, record, document or diagnostic (:func:`infer_shape`); the fingerprint
(:func:`schema_of`) changes when a field is added, removed or changes kind, not when values do.
"""

from __future__ import annotations

import hashlib
import re
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from collector.decode import json_value

MAX_JSON_BYTES = 64 * 1024 * 1024
"""Larger JSON results are not parsed for shape and fingerprint (said in a warning)."""

MAX_SCHEMA_NODES = 2_000_000
"""Fingerprints walk at most this many JSON values (said in a warning when hit)."""

_LOG_LINE = re.compile(
    r"^\s*(\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}|[IWEF]\d{4} |\{\"(ts|time|timestamp|level)\""
    r"|(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL)\b|Traceback|\s+at |\s+File \"|[A-Z][a-z]{2} +\d+ \d{2}:)"
)
_LIST_KEYS = ("items", "data", "results", "rows", "records", "entries", "hits", "issues", "orders", "values")


def parse_json(text: str) -> tuple[Any, str | None]:
    """Parse ``text`` as JSON when it looks like JSON; return (value, problem)."""
    stripped = text.lstrip()[:1]
    if stripped not in ("{", "["):
        return None, None
    if len(text) > MAX_JSON_BYTES:
        return None, f"JSON result over {MAX_JSON_BYTES // (1024 * 1024)} MiB is not parsed; no shape or fingerprint"
    try:
        return json_value.loads(text), None
    except RecursionError:
        return None, "JSON result is nested deeper than the parser allows; shape and fingerprint not computed"
    except ValueError:
        return None, None  # text that merely starts with a bracket


def infer_shape(text: str, parsed: Any) -> str:
    """Classify a result as list, record, document or diagnostic."""
    if isinstance(parsed, list):
        return "list"
    if isinstance(parsed, dict):
        if parsed.get("kind") == "List" or any(
            isinstance(parsed.get(k), list) and len(parsed[k]) > 1 for k in _LIST_KEYS
        ):
            return "list"
        return "record"
    head = text[:65536]
    low = head[:2048].lower()
    if "<html" in low or "<!doctype" in low or head.count("<div") > 5:
        return "document"
    lines = [ln for ln in head.splitlines() if ln.strip()][:400]
    if not lines:
        return "document"
    if _mostly_log_lines(lines):
        return "diagnostic"
    # a table (kubectl get, ps, SQL clients): an upper-case header among the first lines
    for i, line in enumerate(lines[:5]):
        header = [h for h in re.split(r"\s{2,}|\t", line.strip()) if h]
        if (
            len(header) >= 3
            and len(lines) - i >= 3
            and all(h.replace("-", "").replace("_", "").isupper() for h in header)
        ):
            return "list"
    return "document"


def _mostly_log_lines(lines: list[str]) -> bool:
    """At least 3 of ``lines``, and 30 %, look like log lines; stops as soon as that is decided."""
    need = max(3, len(lines) * 0.3)
    found = 0
    for seen, line in enumerate(lines, start=1):
        if _LOG_LINE.match(line):
            found += 1
            if found >= need:
                return True
        elif found + len(lines) - seen < need:
            return False
    return found >= need


_DYNAMIC_KEY = re.compile(r"^(\d+|[0-9a-f]{8}-[0-9a-f-]{27,}|[0-9a-f]{12,})$", re.I)
_key_names: dict[str, str] = {}
"""Memo of key -> path component: rows of a list repeat the same keys thousands of times."""


def _key_name(key: str) -> str:
    name = _key_names.get(key)
    if name is None:
        name = "*" if _DYNAMIC_KEY.match(key) else key
        if len(_key_names) < 65536:  # bounded: id-like keys are unbounded in number
            _key_names[key] = name
    return name


_TYPE_NAMES: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string",
                                 list: "array", dict: "object", type(None): "null"}  # fmt: skip


def _type_name(value: Any) -> str:
    name = _TYPE_NAMES.get(type(value))
    if name is not None:
        return name
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


_KIND = {"object": "object", "array": "array"}


def schema_of(parsed: Any) -> tuple[str, list[str], bool]:
    """Fingerprint a JSON value by its structure: key paths and the kind of value at each.

    The fingerprint hashes each key path with its kind (object, array or scalar), so it
    is stable under value changes (3 vs 3.5, null vs "late") and key order, and changes
    when a field is added, removed, or turns from a scalar into an object or a list.
    Array elements share the path ``a[]``; keys that look like ids or numbers collapse
    to ``*`` so maps keyed by id do not explode it. The field list keeps the precise
    JSON types (``$[].amount:integer|number``) for diffs.

    Returns:
        (fingerprint, sorted ``path:type`` fields, complete) where ``complete`` is False
        when :data:`MAX_SCHEMA_NODES` stopped the walk.
    """
    signed = _signature(parsed, SIGNATURE_DEPTH)
    if signed is not None and signed[1] <= MAX_SCHEMA_NODES:
        known = _by_signature.get(signed[0])
        if known is not None:
            return known[0], list(known[1]), True
    fingerprint, fields, complete = _walk(parsed)
    if signed is not None and complete:
        if len(_by_signature) >= 4096:  # bounded: a stream of ever-new structures
            _by_signature.clear()
        _by_signature[signed[0]] = (fingerprint, tuple(fields))
    return fingerprint, fields, complete


SIGNATURE_DEPTH = 4
"""How deep :func:`_signature` follows records inside records before it gives up."""
_SCALARS: frozenset[type] = frozenset({bool, int, float, str, type(None)})
_by_signature: dict[Any, tuple[str, tuple[str, ...]]] = {}
"""Memo of a structure's signature (:func:`_signature`) to its (fingerprint, fields)."""


def _signature(value: Any, depth: int) -> tuple[Any, int] | None:
    """(a key that determines :func:`schema_of`'s answer for ``value``, how many values it holds),
    or None when ``value`` is not of the shapes worked out here.

    Most results are a list of flat records with one set of keys, a record of scalars, or a
    record holding such lists: their key is taken from the keys and from the value types of each
    column (the rows transposed by ``zip``), by loops that run in C. Walking them was ~12 us of
    the ~70 us of measuring a 14-row result; the key takes about half of that (a frozenset of
    each row's types took ~15 % more). Any other value (rows of differing keys, lists of lists,
    subclasses of the JSON types) returns None and is walked."""
    kind = type(value)
    if kind in _SCALARS:
        return kind, 1
    if depth <= 0:
        return None
    if kind is list:
        if not value:
            return ("[]",), 1
        kinds = set(map(type, value))
        if kinds <= _SCALARS:
            return ("[s]", frozenset(kinds)), 1 + len(value)
        if kinds != {dict}:
            return None
        keysets = set(map(tuple, value))
        if len(keysets) != 1:
            return None
        # the kinds of each column, the rows transposed by zip: what the walk records a path
        columns = tuple(map(frozenset, map(map, repeat(type), zip(*map(dict.values, value), strict=True))))
        if not _SCALARS.issuperset(chain.from_iterable(columns)):
            return None
        keys = keysets.pop()
        return ("[r]", keys, columns), 1 + len(value) * (1 + len(keys))
    if kind is not dict:
        return None
    parts: list[Any] = []
    nodes = 1
    for child in value.values():
        child_kind = type(child)
        if child_kind in _SCALARS:
            parts.append(child_kind)
            nodes += 1
            continue
        signed = _signature(child, depth - 1)
        if signed is None:
            return None
        parts.append(signed[0])
        nodes += signed[1]
    return ("{}", tuple(value), tuple(parts)), nodes


def _walk(parsed: Any) -> tuple[str, list[str], bool]:
    """:func:`schema_of` by walking ``parsed`` (a column at a time, see :func:`_column`)."""
    types: dict[str, set[str]] = {}
    stack: list[tuple[str, Any]] = [("$", parsed)]
    columns: list[tuple[str, list[Any]]] = []
    seen = 0
    type_names = _TYPE_NAMES
    flat_done: set[tuple[str, tuple[str, ...], tuple[type, ...]]] = set()
    while seen < MAX_SCHEMA_NODES:
        if columns:
            path, values = columns.pop()
            seen = _column(path, values, types, flat_done, stack, columns, seen)
            continue
        if not stack:
            break
        path, value = stack.pop()
        seen += 1
        kind = type_names.get(type(value)) or _type_name(value)
        path_types = types.get(path)
        if path_types is None:
            types[path] = path_types = set()
        path_types.add(kind)
        if kind == "object":
            seen += _members(path, value, types, flat_done, stack)
        elif kind == "array" and value:
            columns.append((f"{path}[]", value))
    # a tool returns the same structure call after call: its fingerprint is worked out once
    key = tuple((path, tuple(seen_types)) for path, seen_types in types.items())
    known = _fingerprints.get(key)
    if known is None:
        known = _fingerprint(types)
        if len(_fingerprints) >= 4096:  # bounded: a stream of ever-new structures
            _fingerprints.clear()
        _fingerprints[key] = known
    return known[0], list(known[1]), not stack and not columns


def _members(path: str, obj: dict[str, Any], types: dict[str, set[str]],
             flat_done: set[tuple[str, tuple[str, ...], tuple[type, ...]]], stack: list[tuple[str, Any]]) -> int:  # fmt: skip
    """Walk the members of the object ``obj`` at ``path``: scalars are recorded here, without a
    trip through the stack, objects and lists go on the stack. An object of scalars whose
    (path, keys, types) was walked already adds nothing and is skipped after a check done in C:
    rows of a list mostly repeat one set of keys with the same value types (the walk was ~95 us
    of a small result's ~230 us). Returns how many values it saw."""
    value_types = tuple(map(type, obj.values()))
    if dict not in value_types and list not in value_types:
        signature = (path, tuple(obj), value_types)
        if signature in flat_done:
            return len(value_types)
        flat_done.add(signature)
    seen = 0
    type_names = _TYPE_NAMES
    for key, child in obj.items():
        child_path = f"{path}.{_key_name(key)}"
        child_kind = type_names.get(type(child))
        if child_kind is None or child_kind == "object" or child_kind == "array":
            stack.append((child_path, child))  # walked from the stack (a subclass of a JSON type too)
            continue
        seen += 1
        child_types = types.get(child_path)
        if child_types is None:
            types[child_path] = child_types = set()
        child_types.add(child_kind)
    return seen


def _column(path: str, values: list[Any], types: dict[str, set[str]],
            flat_done: set[tuple[str, tuple[str, ...], tuple[type, ...]]], stack: list[tuple[str, Any]],
            columns: list[tuple[str, list[Any]]], seen: int) -> int:  # fmt: skip
    """Walk ``values``, which share ``path`` (a list's elements, or one key's values across the
    rows of a list), a column at a time: the kinds are taken over the whole column in C
    (``set(map(type, ...))``), the elements of its lists and the keys of its objects become
    columns of their own. Walking row by row cost ~1.2 us a row: a 14-row result's fingerprint
    took ~21 us, a sixth of measuring it. Returns the values seen so far."""
    room = MAX_SCHEMA_NODES - seen
    if len(values) > room:
        columns.append((path, values[room:]))  # left unwalked: the walk says it is incomplete
        values = values[:room]
    names = types.get(path)
    if names is None:
        types[path] = names = set()
    kinds = set(map(type, values))
    seen += len(values)
    for kind in kinds:
        name = _TYPE_NAMES.get(kind)
        if name is None:  # a subclass of a JSON type: walked from the stack (see _type_name)
            odd = [(path, v) for v in values if type(v) is kind]
            stack.extend(odd)
            seen -= len(odd)
            continue
        names.add(name)
        if name == "array":
            lists = values if len(kinds) == 1 else [v for v in values if type(v) is list]
            elements = list(chain.from_iterable(lists))
            if elements:
                columns.append((f"{path}[]", elements))
        elif name == "object":
            rows = values if len(kinds) == 1 else [v for v in values if type(v) is dict]
            seen = _rows(path, rows, types, flat_done, stack, columns, seen)
    return seen


def _rows(path: str, rows: list[dict[str, Any]], types: dict[str, set[str]],
          flat_done: set[tuple[str, tuple[str, ...], tuple[type, ...]]], stack: list[tuple[str, Any]],
          columns: list[tuple[str, list[Any]]], seen: int) -> int:  # fmt: skip
    """The objects at ``path`` (already counted): rows with the same keys, in the same order,
    become one column per key; a row whose keys no other row has is walked by :func:`_members`."""
    keysets = set(map(tuple, rows))
    groups: Any
    if len(keysets) == 1:
        groups = ((keysets.pop(), rows),)
    else:
        by_keys: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in rows:
            keys = tuple(row)
            group = by_keys.get(keys)
            if group is None:
                by_keys[keys] = [row]
            else:
                group.append(row)
        groups = by_keys.items()
    for keys, group in groups:
        if len(group) == 1:
            seen += _members(path, group[0], types, flat_done, stack)
            continue
        for key in keys:
            columns.append((f"{path}.{_key_name(key)}", list(map(itemgetter(key), group))))
    return seen


_fingerprints: dict[tuple[tuple[str, tuple[str, ...]], ...], tuple[str, tuple[str, ...]]] = {}
"""Memo of a walk's (path, kinds seen) to its (fingerprint, fields)."""


def _fingerprint(types: dict[str, set[str]]) -> tuple[str, tuple[str, ...]]:
    fields = []
    structure = []
    for path, seen_types in types.items():
        concrete = seen_types - {"null"} or {"null"}
        fields.append(f"{path}:{'|'.join(sorted(concrete))}")
        kinds = sorted({_KIND.get(t, "scalar") for t in concrete})
        structure.append(f"{path}:{'|'.join(kinds)}")
    fields.sort()
    structure.sort()
    return hashlib.sha256("\n".join(structure).encode()).hexdigest()[:16], tuple(fields)


def schema_by_every_value(parsed: Any) -> tuple[str, list[str]]:
    """What :func:`schema_of` must give, the plain way: every value visited, recursively, with no
    shortcut and no node limit. Its reference in the tests and the baseline of
    ``benchmarks/bench_fingerprint.py``; recursion bounds the nesting it can take."""
    types: dict[str, set[str]] = {}

    def walk(path: str, value: Any) -> None:
        types.setdefault(path, set()).add(_type_name(value))
        if isinstance(value, dict):
            for key, child in value.items():
                walk(f"{path}.{_key_name(key)}", child)
        elif isinstance(value, list):
            for child in value:
                walk(f"{path}[]", child)

    walk("$", parsed)
    fingerprint, fields = _fingerprint(types)
    return fingerprint, list(fields)
