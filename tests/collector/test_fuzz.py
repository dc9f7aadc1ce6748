"""Hostile input, generated: OTLP bodies, attribute values, declared ranges, HTTP requests.

Properties (hypothesis):

a) decoding any body either works or raises :class:`InputError` with a message, and what
   the receiver does next with the decoded spans (classify, extract) raises nothing;
b) hostile spans mixed with good ones go decode -> pipeline -> DuckDB in one batch: the
   good ones are stored with exact token counts, each hostile one is stored with a
   warning or rejected with a reason, and the batch is never lost;
c) ``measure()`` corrects any declared retained ranges and says so;
d) a real receiver on loopback answers every request (4xx with a message naming the
   problem) and stores each good span exactly once.

Examples per property: small by default (CI); ``TOOLMETER_FUZZ_EXAMPLES=N`` runs N (the
slower properties run a fixed fraction of N) with fresh randomness each run, which is how
``benchmarks/soak.py`` uses this file. The regression tests below pin the crashes these
properties found.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import math
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from collector.config import CollectorConfig
from collector.decode.request import JSON, PROTOBUF, Decoded, decode_logs, decode_traces
from collector.dialects.spans import LLM, TOOL, classify, extract_llm_call, extract_tool_call
from collector.errors import InputError
from collector.measure.measurement import MAX_INT64, measure
from collector.measure.tokens import TokenCounter, get_encoding
from collector.model import Item, ToolCall
from collector.pipeline import Pipeline
from collector.serve.receiver import ReceiverConfig, RunningReceiver
from collector.store.database import read_connection

# --- how many examples -------------------------------------------------------------------

# read at import: the autouse fixture clears TOOLMETER_* variables before each test
_ASKED = int(os.environ.get("TOOLMETER_FUZZ_EXAMPLES") or 0)


def fuzz(ci: int, share: int = 1) -> settings:
    """``ci`` examples by default; ``TOOLMETER_FUZZ_EXAMPLES // share`` when that is set."""
    return settings(
        max_examples=max(_ASKED // share, 1) if _ASKED else ci,
        deadline=None,
        derandomize=not _ASKED,  # CI runs the same cases every time; soak runs explore
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )


ENC = get_encoding("o200k_base")
MAX_TIME = 2**63 - 1
_trace_numbers = itertools.count(1)


def fresh_trace() -> str:
    return f"{os.getpid():08x}{next(_trace_numbers):024x}"


# --- OTLP building blocks --------------------------------------------------------------------


def json_any(v: Any) -> dict[str, Any]:
    """``v`` as an OTLP/JSON AnyValue (NaN and infinities as the strings the encoding uses)."""
    if v is None:
        return {}
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        if math.isnan(v):
            return {"doubleValue": "NaN"}
        if math.isinf(v):
            return {"doubleValue": "Infinity" if v > 0 else "-Infinity"}
        return {"doubleValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, bytes):
        return {"bytesValue": base64.b64encode(v).decode()}
    if isinstance(v, list):
        return {"arrayValue": {"values": [json_any(x) for x in v]}}
    assert isinstance(v, dict)
    return {"kvlistValue": {"values": [{"key": k, "value": json_any(x)} for k, x in v.items()]}}


def proto_any(v: Any, out: AnyValue) -> None:
    if v is None:
        return
    if isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, int):
        out.int_value = v
    elif isinstance(v, float):
        out.double_value = v
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, bytes):
        out.bytes_value = v
    elif isinstance(v, list):
        out.array_value.SetInParent()
        for x in v:
            proto_any(x, out.array_value.values.add())
    else:
        out.kvlist_value.SetInParent()
        for k, x in v.items():
            kv = out.kvlist_value.values.add()
            kv.key = k
            proto_any(x, kv.value)


@dataclass
class Span:
    """One span to send; ``raw`` overrides the encoded form of a field (JSON only)."""

    span_id: str
    name: str
    attrs: dict[str, Any]
    trace_id: str = ""
    start: Any = 1_763_800_000_000_000_000
    end: Any = 1_763_800_000_005_000_000
    status: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def json_body(spans: list[Span], resource: dict[str, Any] | None = None) -> bytes:
    docs = []
    for s in spans:
        d: dict[str, Any] = {
            "traceId": s.trace_id,
            "spanId": s.span_id,
            "name": s.name,
            "startTimeUnixNano": s.start if isinstance(s.start, float) else str(s.start),
            "endTimeUnixNano": s.end if isinstance(s.end, float) else str(s.end),
            "attributes": [{"key": k, "value": json_any(v)} for k, v in s.attrs.items()],
            "status": s.status,
        }
        d.update(s.raw)
        docs.append(d)
    res = [{"key": k, "value": json_any(v)} for k, v in (resource or {"service.name": "fuzz"}).items()]
    doc = {"resourceSpans": [{"resource": {"attributes": res}, "scopeSpans": [{"spans": docs}]}]}
    return json.dumps(doc).encode()  # ensure_ascii: lone surrogates travel as \ud800 escapes


def proto_id(text: str, size: int) -> bytes:
    """The id's bytes; a bad one becomes too short (what protobuf can say of a bad id)."""
    try:
        return bytes.fromhex(text) if len(text) == 2 * size else text.encode()[: size - 1]
    except ValueError:
        return text.encode()[: size - 1]


def proto_body(spans: list[Span]) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "fuzz"
    ss = rs.scope_spans.add()
    for s in spans:
        p = ss.spans.add()
        p.trace_id, p.span_id = proto_id(s.trace_id, 16), proto_id(s.span_id, 8)
        p.name = s.name
        p.start_time_unix_nano, p.end_time_unix_nano = s.start, s.end
        if s.status:
            p.status.code = s.status.get("code", 0)
            p.status.message = s.status.get("message", "")
        for k, v in s.attrs.items():
            a = p.attributes.add()
            a.key = k
            proto_any(v, a.value)
    return bytes(req.SerializeToString())


def body_of(spans: list[Span], content_type: str) -> bytes:
    return proto_body(spans) if content_type == PROTOBUF else json_body(spans)


# --- strategies -----------------------------------------------------------------------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


@st.composite
def with_lone_surrogates(draw: st.DrawFn) -> str:
    """Text with at least one lone surrogate (separated, so no two pair up in JSON)."""
    parts = draw(st.lists(st.tuples(st.text(max_size=8), SURROGATES), min_size=1, max_size=4))
    return "".join(f"{t}x{c}" for t, c in parts) + "x"


def any_values(for_json: bool, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Attribute values of every OTLP kind; beyond-int64 ints and surrogates only in JSON."""
    text = st.text(max_size=40) | (with_lone_surrogates() if for_json else st.text(max_size=40))
    ints = st.integers(-(2**80), 2**80) if for_json else INT64
    leaves = st.none() | st.booleans() | ints | st.floats() | text | st.binary(max_size=40)
    return st.recursive(
        leaves,
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
        max_leaves=max_leaves,
    )


def nested_json_text(depth: int) -> str:
    return '{"a":' * (depth // 2) + "[" * (depth - depth // 2) + "]" * (depth - depth // 2) + "}" * (depth // 2)


GOOD_TEXT = st.text(max_size=300) | st.sampled_from(
    ["", "<|endoftext|>", "a <|endoftext|> b <|fim_prefix|>", " ", "\n\n", "\x00", "🙂" * 20]
)


# --- what a hostile span is expected to become --------------------------------------------------

RECORDED, REJECTED, IGNORED = "recorded", "rejected", "ignored"


@dataclass
class Case:
    """A span and what must become of it."""

    span: Span
    outcome: str
    text: str | bytes | None = None
    """For recorded tool spans: the raw result as toolmeter must measure it."""
    warning: str | None = None
    """A word one of the row's warnings (or, when rejected, the rejection) must contain."""
    kind: str = TOOL


def payload_of(value: Any) -> str | bytes:
    """The text toolmeter measures for an attribute value (strings and bytes as they are)."""
    if isinstance(value, (str, bytes)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def tool_span(span_id: str, result: Any, **attrs: Any) -> Span:
    a = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fuzz_tool", "gen_ai.tool.call.result": result}
    a.update(attrs)
    return Span(span_id, "execute_tool fuzz_tool", a)


def result_warning(value: Any) -> str | None:
    data = payload_of(value)
    if isinstance(data, bytes):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return "not valid UTF-8"
        return "binary" if b"\x00" in data[:8192] else None
    try:
        data.encode("utf-8")
    except UnicodeEncodeError:
        return "surrogate"
    return None


@st.composite
def hostile_case(draw: st.DrawFn, span_id: str, for_json: bool) -> Case:
    """One hostile tool or LLM span, and what must become of it."""
    choices = ["result", "deep", "metadata", "llm", "bad_id", "bad_time", "op_array"]
    if for_json:
        choices += ["bad_any", "surrogate_name"]
    which = draw(st.sampled_from(choices))
    if which == "result":
        value = draw(any_values(for_json).filter(lambda v: v is not None))
        return Case(tool_span(span_id, value), RECORDED, payload_of(value), result_warning(value))
    if which == "deep":
        text = nested_json_text(draw(st.integers(1, 3000)))
        return Case(tool_span(span_id, text), RECORDED, text)
    if which == "metadata":
        key, value, word = draw(
            st.sampled_from(
                [
                    ("toolmeter.raw.bytes", MAX_INT64, None),  # declared past the payload: estimated, capped
                    ("toolmeter.budget.tokens", math.nan, "non-negative integer"),
                    ("toolmeter.budget.tokens", math.inf, "non-negative integer"),
                    ("toolmeter.view.tokens", -5, "non-negative integer"),
                    ("toolmeter.shape", ["list"], "must be one of"),
                    ("toolmeter.retained", "[[0, 1e400]]", "retained"),
                    ("toolmeter.retained", "[" * 5000, "retained"),
                    ("toolmeter.retained", "0-99999999999999999999999", None),
                    ("toolmeter.truncated", "maybe", "boolean"),
                    ("gen_ai.tool.call.id", {"a": [1, 2]}, None),
                ]
                + ([("toolmeter.raw.bytes", 2**70, "64-bit")] if for_json else [])
            )
        )
        result = draw(GOOD_TEXT)
        return Case(tool_span(span_id, result, **{key: value}), RECORDED, result, word)
    if which == "llm":
        messages = draw(
            st.sampled_from(
                [
                    b"\xff\xfe",
                    [{"parts": [{"type": "tool_call_response", "id": "c1", "response": b"\x00\xff"}]}],
                    [{"parts": 5}],
                    "[" * 5000,
                    json.dumps([{"parts": [{"type": "tool_call_response", "id": 7, "response": {"x": [1]}}]}]),
                ]
                + ([[{"parts": [{"type": "tool_call_response", "id": "\ud800", "response": "r"}]}]] if for_json else [])
            )
        )
        tokens = draw(st.sampled_from([math.nan, -1, "many", 2**62]))
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": messages,
            "gen_ai.usage.input_tokens": tokens,
        }
        attrs[f"llm.input_messages.{'9' * 5000}.message.role"] = "tool"
        return Case(Span(span_id, "chat model", attrs), RECORDED, kind=LLM)
    if which == "bad_id":
        span = tool_span(span_id, "fine")
        # never 32 hex characters, nor the 24 of a base64 id
        span.trace_id = draw(
            st.text(min_size=1, max_size=10) | st.sampled_from(["zz" * 16, "ab" * 15, "ab" * 17, "0x" * 16])
        )
        return Case(span, REJECTED, warning="trace")
    if which == "bad_time":
        span = tool_span(span_id, "fine")
        if for_json:
            span.start = draw(st.sampled_from([-1, 2**63, 2**64 + 5, 10**30, float("inf"), 1e400]))
        else:
            span.start = span.end = draw(st.integers(2**63, 2**64 - 1))
        return Case(span, REJECTED, warning="time" if not for_json else "TimeUnixNano")
    if which == "op_array":  # not a tool or LLM call at all: left out, silently
        span = tool_span(span_id, "fine")
        span.attrs["gen_ai.operation.name"] = draw(st.sampled_from([["execute_tool"], {"k": "chat"}, b"chat"]))
        span.name = "fuzz"
        return Case(span, IGNORED)
    if which == "bad_any":
        span = tool_span(span_id, "fine")
        bad: object = draw(
            st.sampled_from(
                [{"intValue": "abc"}, {"intValue": 1e400}, {"doubleValue": "x"}, {"bytesValue": "abc"}, [1]]
            )
        )
        encoded: list[object] = [{"key": k, "value": json_any(v)} for k, v in span.attrs.items()]
        span.raw["attributes"] = [*encoded, {"key": "k", "value": bad}]
        return Case(span, REJECTED, warning="cannot be read")
    # surrogate_name
    name = draw(with_lone_surrogates())
    span = tool_span(span_id, "fine", **{"gen_ai.tool.name": name})
    span.status = {"code": 2, "message": draw(with_lone_surrogates())}
    return Case(span, RECORDED, "fine", "surrogate")


Batch = tuple[list[Case], list[tuple[str, str]]]


@st.composite
def mixed_batch(draw: st.DrawFn, for_json: bool) -> Batch:
    """Hostile cases and good tool spans (span id, result), for one request (shuffled by the check)."""
    ids = (f"{i:016x}" for i in itertools.count(1))
    good = [(next(ids), draw(GOOD_TEXT)) for _ in range(draw(st.integers(1, 4)))]
    cases = [draw(hostile_case(next(ids), for_json)) for _ in range(draw(st.integers(1, 5)))]
    return cases, good


# --- (a) decoding --------------------------------------------------------------------------------


def decodes_or_says_why(decode: Callable[[bytes, str, str], Decoded], body: bytes, content_type: str) -> None:
    """The body decodes, or InputError says why; and the receiver's next steps raise nothing."""
    try:
        decoded = decode(body, content_type, "fuzz")
    except InputError as e:
        assert str(e).strip(), "an InputError must say what is wrong"
        return
    assert decoded.rejected >= 0
    if decoded.rejected:
        message = decoded.rejection_message()
        assert message, "rejected items need a reason"
        message.encode("utf-8")  # it travels in a protobuf string
    for span in decoded.spans:
        assert len(span.trace_id) == 32 and len(span.span_id) == 16
        assert 0 <= span.start_ns <= MAX_TIME and 0 <= span.end_ns <= MAX_TIME
        kind = classify(span.name, span.attributes)
        if kind == TOOL:
            extract_tool_call(span)
        elif kind == LLM:
            extract_llm_call(span)
    for log in decoded.logs:
        assert 0 <= log.time_ns <= MAX_TIME


@st.composite
def mutated(draw: st.DrawFn, bodies: st.SearchStrategy[bytes]) -> bytes:
    """A body with a few byte-level mutations: flips, inserts, deletes, cuts, repeats."""
    body = bytearray(draw(bodies))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "repeat"]))
        at = draw(st.integers(0, len(body)))
        if op == "flip" and at < len(body):
            body[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and at < len(body):
            body[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x0A, 0x22, 0x5C, 0x7B, 0x5B]))
        elif op == "insert":
            body[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del body[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del body[at:]
        elif op == "repeat":
            body[at:at] = body[at : at + draw(st.integers(1, 32))]
    return bytes(body)


def flat_values(for_json: bool) -> st.SearchStrategy[Any]:
    """Cheaper to draw than :func:`any_values` (decoding runs many more cases); lists one deep."""
    text = st.text(max_size=30) | (with_lone_surrogates() if for_json else st.nothing())
    leaves = (
        st.none() | st.booleans() | (st.integers() if for_json else INT64) | st.floats() | text | st.binary(max_size=30)
    )
    return leaves | st.lists(leaves, max_size=3)


@st.composite
def valid_trace_bodies(draw: st.DrawFn, for_json: bool) -> bytes:
    spans = []
    for i in range(draw(st.integers(0, 4))):
        attrs = dict(
            draw(
                st.lists(st.tuples(st.sampled_from(ATTR_KEYS) | st.text(max_size=8), flat_values(for_json)), max_size=5)
            )
        )
        span = Span(f"{i + 1:016x}", draw(st.sampled_from(["execute_tool t", "chat m", "x", ""])), attrs, "ab" * 16)
        spans.append(span)
    return json_body(spans) if for_json else proto_body(spans)


@st.composite
def valid_log_bodies(draw: st.DrawFn) -> bytes:
    req = ExportLogsServiceRequest()
    records = req.resource_logs.add().scope_logs.add()
    for _ in range(draw(st.integers(0, 3))):
        rec = records.log_records.add()
        rec.time_unix_nano = draw(st.integers(0, 2**64 - 1))
        for k, v in draw(st.lists(st.tuples(st.sampled_from(CC_KEYS), flat_values(False)), max_size=5)):
            a = rec.attributes.add()
            a.key = k
            proto_any(v, a.value)
    return bytes(req.SerializeToString())


ATTR_KEYS = [
    "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.result", "gen_ai.tool.call.id",
    "gen_ai.input.messages", "gen_ai.usage.input_tokens", "toolmeter.raw.bytes", "toolmeter.retained",
    "toolmeter.truncated", "toolmeter.shape", "toolmeter.view", "openinference.span.kind", "mlflow.spanType",
    "mlflow.spanOutputs", "ai.operationId", "ai.toolCall.result", "langfuse.observation.type",
    "langfuse.observation.usage_details", "traceloop.span.kind",
]  # fmt: skip
CC_KEYS = ["event.name", "tool_name", "success", "duration_ms", "tool_result_size_bytes", "input_tokens", "model"]

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=20,
)


def nodes(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from nodes(v, (*path, i))


@st.composite
def reshaped_json(draw: st.DrawFn) -> bytes:
    """A valid OTLP/JSON request with a few of its nodes replaced by arbitrary JSON."""
    doc = json.loads(draw(valid_trace_bodies(True)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(nodes(doc))))
        value = draw(JSON_VALUES | st.sampled_from([1e400, 10**5000, "NaN", "\ud800", [], {}]))
        if not path:
            doc = value
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = value
    try:
        return json.dumps(doc).encode()
    except ValueError:  # an int past the digit limit, after all
        return b'{"resourceSpans": ' + b"1" * 5000 + b"}"


@pytest.mark.parametrize("decode", [decode_traces, decode_logs])
@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
@fuzz(ci=30)
@given(body=st.binary(max_size=2000))
def test_arbitrary_bytes_decode_or_raise_input_error(decode, content_type: str, body: bytes) -> None:  # type: ignore[no-untyped-def]
    decodes_or_says_why(decode, body, content_type)


@fuzz(ci=50)
@given(body=mutated(valid_trace_bodies(False)) | valid_trace_bodies(False))
def test_mutated_protobuf_traces_decode_or_raise_input_error(body: bytes) -> None:
    decodes_or_says_why(decode_traces, body, PROTOBUF)


@fuzz(ci=30)
@given(body=mutated(valid_log_bodies()) | valid_log_bodies())
def test_mutated_protobuf_logs_decode_or_raise_input_error(body: bytes) -> None:
    decodes_or_says_why(decode_logs, body, PROTOBUF)


@fuzz(ci=50)
@given(body=reshaped_json() | mutated(valid_trace_bodies(True)) | JSON_VALUES.map(lambda d: json.dumps(d).encode()))
def test_arbitrary_and_mutated_json_traces_decode_or_raise_input_error(body: bytes) -> None:
    decodes_or_says_why(decode_traces, body, JSON)


@fuzz(ci=30)
@given(doc=JSON_VALUES, where=st.sampled_from(["resourceLogs", "scopeLogs", "logRecords", "record"]))
def test_reshaped_json_logs_decode_or_raise_input_error(doc: Any, where: str) -> None:
    record = {"timeUnixNano": "1", "attributes": [{"key": "event.name", "value": {"stringValue": "tool_result"}}]}
    if where == "record":
        record = doc
    scope = {"logRecords": doc if where == "logRecords" else [record]}
    resource = {"scopeLogs": doc if where == "scopeLogs" else [scope]}
    body = {"resourceLogs": doc if where == "resourceLogs" else [resource]}
    decodes_or_says_why(decode_logs, json.dumps(body).encode(), JSON)


# --- (b) hostile spans through decode -> pipeline -> DuckDB ----------------------------------------


def ingest(pipeline: Pipeline, body: bytes, content_type: str) -> Decoded:
    """What the receiver's writer does with one accepted request (see Receiver._export)."""
    decoded = decode_traces(body, content_type, "otlp")
    items = [Item(k, s) for s in decoded.spans if (k := classify(s.name, s.attributes)) in (TOOL, LLM)]
    pipeline.write(pipeline.build_batch(items))
    return decoded


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    """One store for every example (each example writes its own trace)."""
    made = Pipeline(CollectorConfig(db=str(tmp_path_factory.mktemp("fuzz") / "fuzz.duckdb")))
    made.store.ensure_schema()
    return made


def check_mixed_batch(
    pipeline: Pipeline, content_type: str, counter: TokenCounter, batch: Batch, data: st.DataObject
) -> None:
    """Send good and hostile spans shuffled in one request; check what became of each."""
    cases, good = batch
    trace = fresh_trace()
    spans = [tool_span(span_id, text) for span_id, text in good] + [c.span for c in cases]
    for s in spans:
        s.trace_id = s.trace_id or trace
    spans = data.draw(st.permutations(spans))
    decoded = ingest(pipeline, body_of(spans, content_type), content_type)

    rejected = [c for c in cases if c.outcome == REJECTED]
    assert decoded.rejected == len(rejected)
    errors = [i.message for i in decoded.issues if i.level == "error"]
    for c in rejected:
        assert c.warning is not None
        assert any(c.warning in m for m in errors), (c.warning, errors)
    with read_connection(pipeline.config.db) as con:
        rows = {
            r[0]: r[1:]
            for r in con.execute(
                # calls derived from hostile LLM inputs' tool responses are legitimate rows of their own
                "SELECT span_id, raw_bytes, raw_tokens, raw_tokens_exact, warnings, tool_name "
                "FROM tool_calls WHERE trace_id = ? AND origin IS DISTINCT FROM 'messages'",
                [trace],
            ).fetchall()
        }
        llm_ids = {r[0] for r in con.execute("SELECT span_id FROM llm_calls WHERE trace_id = ?", [trace]).fetchall()}
    for span_id, text in good:
        data_ = text.encode()
        assert rows[span_id][:3] == (len(data_), len(ENC.encode_ordinary(text)), True), span_id
    for c in cases:
        if c.outcome == RECORDED and c.kind == LLM:
            assert c.span.span_id in llm_ids
        elif c.outcome == RECORDED:
            raw_bytes, raw_tokens, _, warnings, _ = rows[c.span.span_id]
            assert c.text is not None
            if isinstance(c.text, bytes):
                expected = (len(c.text), counter.count(c.text.decode("utf-8", "replace")).tokens)
            else:
                expected = (len(c.text.encode("utf-8", "surrogatepass")), counter.count(c.text).tokens)
            if c.span.attrs.get("toolmeter.raw.bytes") == MAX_INT64:
                assert raw_bytes == MAX_INT64 and 0 <= raw_tokens <= MAX_INT64  # declared, estimated
            else:
                assert (raw_bytes, raw_tokens) == expected
            if c.warning:
                assert any(c.warning in w for w in warnings), (c.warning, warnings)
        else:
            assert c.span.span_id not in rows and c.span.span_id not in llm_ids
    recorded = {s for s, _ in good} | {c.span.span_id for c in cases if c.outcome == RECORDED and c.kind == TOOL}
    assert set(rows) == recorded


@fuzz(ci=6, share=20)
@given(batch=mixed_batch(for_json=True), data=st.data())
def test_hostile_json_spans_never_cost_the_good_ones(pipeline, counter, batch, data) -> None:  # type: ignore[no-untyped-def]
    check_mixed_batch(pipeline, JSON, counter, batch, data)


@fuzz(ci=6, share=20)
@given(batch=mixed_batch(for_json=False), data=st.data())
def test_hostile_protobuf_spans_never_cost_the_good_ones(pipeline, counter, batch, data) -> None:  # type: ignore[no-untyped-def]
    check_mixed_batch(pipeline, PROTOBUF, counter, batch, data)


CALL_IDS = st.none() | st.text(max_size=6) | st.sampled_from(["c1", "c2", ""]) | st.integers(-(2**63), 2**63 - 1)
SMALL_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=10,
)
TOOL_CALLS = st.lists(
    st.fixed_dictionaries({}, optional={
        "id": CALL_IDS, "type": st.just("function"), "name": SMALL_JSON,
        "function": st.fixed_dictionaries({}, optional={"name": st.text(max_size=6) | SMALL_JSON}) | SMALL_JSON}),
    max_size=3,
)  # fmt: skip
MESSAGE_BODIES = SMALL_JSON | st.fixed_dictionaries({}, optional={
    "content": SMALL_JSON, "id": CALL_IDS, "tool_call_id": CALL_IDS, "name": st.text(max_size=6) | SMALL_JSON,
    "role": st.sampled_from(["tool", "assistant", "user", ""]) | SMALL_JSON, "tool_calls": TOOL_CALLS | SMALL_JSON})  # fmt: skip
MESSAGE_EVENTS = st.sampled_from(["gen_ai.tool.message", "gen_ai.assistant.message", "gen_ai.user.message",
                                  "gen_ai.choice", "gen_ai.client.inference.operation.details", ""])  # fmt: skip


@fuzz(ci=25, share=10)
@given(records=st.lists(st.tuples(MESSAGE_EVENTS, MESSAGE_BODIES, st.booleans(), st.booleans()), min_size=1,
                        max_size=6), cut=st.integers(0, 6))  # fmt: skip
def test_hostile_message_log_records_never_fail_a_write(pipeline, records, cut: int) -> None:  # type: ignore[no-untyped-def]
    """GenAI message log records of any shape, with and without a trace or span, split over two
    batches anywhere: both batches are written, and records with no trace are said to be skipped."""
    trace = fresh_trace()
    batches = []
    for part in (records[:cut], records[cut:]):
        req = ExportLogsServiceRequest()
        scope = req.resource_logs.add().scope_logs.add()
        for i, (event, body, traced, in_span) in enumerate(part):
            rec = scope.log_records.add()
            rec.time_unix_nano, rec.event_name = 1_800_000_000_000_000_000 + i, event
            if traced:
                rec.trace_id = bytes.fromhex(trace)
            if in_span:
                rec.span_id = b"\x01" * 8
            proto_any(body, rec.body)
        decoded = decode_logs(req.SerializeToString(), PROTOBUF, "otlp")
        batches.append(pipeline.build_batch([Item("log", log) for log in decoded.logs]))  # type: ignore[arg-type]
    for batch, part in zip(batches, (records[:cut], records[cut:]), strict=True):
        pipeline.write(batch)  # raises nothing: a write that failed here would be retried forever
        untraced = sum(1 for event, _, traced, _ in part if not traced and event not in ("", "gen_ai.choice"))
        said = [r for r in batch.issue_rows if r["field"] == "traceId"]
        assert len(said) == (1 if untraced else 0)
        assert all(r["trace_id"] == trace for r in batch.message_rows + batch.name_rows)


# --- (c) declared retained ranges ----------------------------------------------------------------

OFFSETS = st.integers(-(2**70), 2**70) | st.integers(-5, 300)
COUNTER = TokenCounter("o200k_base")


@fuzz(ci=60)
@given(
    raw=st.binary(max_size=300) | st.text(max_size=200),
    ranges=st.lists(st.tuples(OFFSETS, OFFSETS), max_size=300),
    have_raw=st.booleans(),
    declared_bytes=st.none() | st.integers(0, 2**63 - 1),
    view=st.none() | st.text(max_size=50),
)
def test_declared_retained_ranges_are_corrected_and_reported(
    raw: str | bytes, ranges: list[tuple[int, int]], have_raw: bool, declared_bytes: int | None, view: str | None
) -> None:
    call = ToolCall(
        trace_id="a" * 32, span_id="b" * 16, tool_name="t", dialect="gen_ai", start_ns=1, end_ns=2,
        raw=raw if have_raw else None, view=view, truncated=True, retained=tuple(ranges),
        raw_bytes_declared=None if have_raw else declared_bytes,
    )  # fmt: skip
    row = measure(call, COUNTER).row()  # raised nothing
    raw_len = len(raw if isinstance(raw, bytes) else raw.encode()) if have_raw else declared_bytes
    limit = MAX_INT64 if raw_len is None else raw_len
    got = [tuple(r) for r in row["retained_ranges"]]
    assert all(0 <= s < e <= limit for s, e in got)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(got)), "sorted, disjoint, not touching"
    assert len(got) <= 256
    if raw_len is not None:
        assert row["retained_bytes"] <= raw_len
        if view is None:
            assert row["view_bytes"] <= raw_len
    warnings = row["warnings"]
    if any(s < 0 or e <= s for s, e in ranges):
        assert any("empty or reversed" in w for w in warnings)
    if any(0 <= s < e and e > limit for s, e in ranges):
        assert any("clipped" in w for w in warnings)
    kept = sorted((s, min(e, limit)) for s, e in ranges if 0 <= s < e and s < min(e, limit))
    if any(a[1] >= b[0] for a, b in itertools.pairwise(kept)):
        assert any("merged" in w for w in warnings)


# --- (d) a real receiver on loopback -----------------------------------------------------------


def post(url: str, body: bytes, content_type: str, **headers: str) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def error_message(body: bytes, content_type: str) -> str:
    """The message of an error response (a google.rpc.Status, as protobuf or JSON)."""
    if content_type.startswith(PROTOBUF):
        return str(status_pb2.Status.FromString(body).message)
    return str(json.loads(body)["message"])


REQUEST_KINDS = ["good", "good_gzip", "resend", "garbage", "bad_gzip", "wrong_type", "partial"]


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningReceiver]:
    running = RunningReceiver(
        CollectorConfig(db=str(tmp_path_factory.mktemp("rx") / "fuzz.duckdb"), flush_interval=0.1),
        ReceiverConfig(host="127.0.0.1", port=0, grpc_port=None),
    )
    yield running
    running.stop()


@fuzz(ci=3, share=200)
@given(kinds=st.lists(st.sampled_from(REQUEST_KINDS), min_size=3, max_size=8), data=st.data())
def test_receiver_keeps_answering_and_stores_good_spans_once(
    receiver: RunningReceiver, kinds: list[str], data: st.DataObject
) -> None:
    url = f"{receiver.url}/v1/traces"
    trace = fresh_trace()
    ids = (f"{i:016x}" for i in itertools.count(1))
    stored_once: set[str] = set()
    sent: list[tuple[bytes, str]] = []
    for kind in kinds:
        ct = data.draw(st.sampled_from([JSON, PROTOBUF]))
        if kind in ("good", "good_gzip", "partial") or (kind == "resend" and not sent):
            spans = [tool_span(next(ids), data.draw(GOOD_TEXT)) for _ in range(data.draw(st.integers(1, 3)))]
            for s in spans:
                s.trace_id = trace
            bad = []
            if kind == "partial":
                bad = [tool_span(next(ids), "bad id")]
                bad[0].trace_id = "nothex"
            body = body_of(spans + bad, ct)
            headers = {}
            if kind == "good_gzip":
                body, headers = gzip.compress(body), {"Content-Encoding": "gzip"}
            status, answer, answer_ct = post(url, body, ct, **headers)
            assert status == 200, answer
            stored_once.update(s.span_id for s in spans)
            sent.append((body if not headers else gzip.decompress(body), ct))
            if bad:
                if answer_ct.startswith(PROTOBUF):
                    partial = ExportTraceServiceResponse.FromString(answer).partial_success
                    assert partial.rejected_spans == 1 and "trace" in partial.error_message
                else:
                    doc = json.loads(answer)["partialSuccess"]
                    assert doc["rejectedSpans"] == "1" and "trace" in doc["errorMessage"]
        elif kind == "resend":  # an exporter retrying: acknowledged again, stored once
            body, sent_ct = data.draw(st.sampled_from(sent))
            assert post(url, body, sent_ct)[0] == 200
        elif kind == "garbage":
            body = data.draw(st.binary(min_size=1, max_size=200))
            status, answer, answer_ct = post(url, body, ct)
            try:
                decode_traces(body, ct, "otlp")
            except InputError as e:
                assert status == 400
                assert error_message(answer, answer_ct) == str(e)
            else:
                assert status == 200
        elif kind == "bad_gzip":
            body = data.draw(st.binary(max_size=100).filter(lambda b: not b.startswith(b"\x1f\x8b")))
            status, answer, answer_ct = post(url, body, ct, **{"Content-Encoding": "gzip"})
            assert status == 400
            assert "gzip" in error_message(answer, answer_ct)
        else:
            wrong = data.draw(st.sampled_from(["text/plain", "application/xml", "multipart/form-data"]))
            status, answer, answer_ct = post(url, b"{}", wrong)
            assert status == 415
            assert f"unsupported content type {wrong!r}" in error_message(answer, answer_ct)
    assert receiver.receiver.flush(timeout_s=120), "every acknowledged request is measured"
    with read_connection(receiver.receiver.config.db) as con:
        counts = dict(
            con.execute(
                "SELECT span_id, count(*) FROM tool_calls WHERE trace_id = ? GROUP BY span_id", [trace]
            ).fetchall()
        )
    assert counts == dict.fromkeys(stored_once, 1)


# --- deterministic: the sizes and depths the properties only sample ---------------------------------


@pytest.mark.slow
def test_a_100_mb_single_line_with_no_cut_points_and_bad_ranges(counter: TokenCounter) -> None:
    # one run of base64-like text: no space or newline, so no exact-count cut point exists
    raw = (base64.b64encode(bytes(range(256))) * 300_000)[:100_000_000]
    call = ToolCall(
        trace_id="a" * 32, span_id="b" * 16, tool_name="t", dialect="gen_ai", start_ns=1, end_ns=2, raw=raw,
        truncated=True, retained=((0, 4096), (4000, 9000), (99_999_000, 2**70), (50, 10)),
    )  # fmt: skip
    measured = measure(call, counter)
    row, payloads = measured.row(), measured.payloads
    assert row["raw_bytes"] == 100_000_000 and payloads["raw"] is raw
    # quicktok counts any run in linear time, exactly; tiktoken's count is cut into pieces and says so
    fast = counter.name.startswith("quicktok")
    assert row["raw_tokens_exact"] is fast and row["raw_tokens"] > 10_000_000
    assert row["retained_ranges"] == [[0, 9000], [99_999_000, 100_000_000]]
    assert row["retained_bytes"] == 10_000 and row["view_bytes"] == 10_000
    for word in ("empty or reversed", "clipped", "merged", *(() if fast else ("approximate",))):
        assert any(word in w for w in row["warnings"]), word


DEEP = nested_json_text(10_000)


@pytest.mark.parametrize("content_type", [JSON, PROTOBUF])
def test_10000_deep_json_results_through_the_pipeline(content_type: str, tmp_path: Path) -> None:
    pipeline = Pipeline(CollectorConfig(db=str(tmp_path / "deep.duckdb")))
    trace = "de" * 16
    spans = [
        tool_span("0000000000000001", DEEP),
        # dialects that JSON-encode results: valid JSON, too deep for the parser
        Span("0000000000000002", "t", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "t", "ai.toolCall.result": DEEP}),
        Span("0000000000000003", "t", {"mlflow.spanType": "TOOL", "mlflow.spanOutputs": DEEP}),
        Span("0000000000000004", "chat m", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": DEEP,
                                            "langfuse.observation.usage_details": DEEP}),
    ]  # fmt: skip
    for s in spans:
        s.trace_id = trace
    decoded = ingest(pipeline, body_of(spans, content_type), content_type)
    assert decoded.rejected == 0
    with read_connection(pipeline.config.db) as con:
        rows = con.execute("SELECT raw_bytes, raw_tokens, warnings FROM tool_calls ORDER BY span_id").fetchall()
        assert con.execute("SELECT count(*) FROM llm_calls").fetchone() == (1,)
    tokens = len(ENC.encode_ordinary(DEEP))
    assert [(b, t) for b, t, _ in rows] == [(len(DEEP), tokens)] * 3
    for _, _, warnings in rows:
        assert any("nested deeper" in w for w in warnings)


def test_10000_deep_request_bodies_are_refused_with_a_reason() -> None:
    deep = b'{"resourceSpans": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    with pytest.raises(InputError, match="nested too deeply"):
        decode_traces(deep, JSON, "otlp")
    with pytest.raises(InputError, match="nested too deeply"):
        decode_logs(deep.replace(b"resourceSpans", b"resourceLogs"), JSON, "otlp")
    value = AnyValue()
    leaf = value
    for _ in range(10_000):
        leaf = leaf.array_value.values.add()
    req = ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    kv = span.attributes.add()
    kv.key = "gen_ai.tool.call.result"
    kv.value.CopyFrom(value)
    with pytest.raises(InputError, match="not a protobuf"):
        decode_traces(req.SerializeToString(), PROTOBUF, "otlp")


# --- regressions: inputs that crashed the decoder, or wedged the receiver's writer ----------------


@pytest.mark.parametrize(
    "doc",
    [
        {"resourceSpans": 5},
        {"resourceSpans": [1, "x"]},
        {"resourceSpans": [{"resource": [1], "scopeSpans": "abc"}]},
        {"resourceSpans": [{"scopeSpans": [7, {"spans": {"a": 1}}]}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": 1e400}]}]}]},
        {"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": {"arrayValue": [1]}}]}}]},
    ],
)
def test_json_of_the_wrong_shape_is_rejected_with_a_reason(doc: dict[str, Any]) -> None:
    decoded = decode_traces(json.dumps(doc).encode(), JSON, "otlp")  # raised AttributeError/TypeError/OverflowError
    assert decoded.spans == []
    if decoded.rejected:
        assert decoded.rejection_message()


@pytest.mark.parametrize(
    "doc",
    [
        {"resourceLogs": 5},
        {"resourceLogs": [1]},
        {"resourceLogs": [{"scopeLogs": [{"logRecords": [3, {"timeUnixNano": 1e400}]}]}]},
        {"resourceLogs": [{"scopeLogs": "x"}]},
    ],
)
def test_json_logs_of_the_wrong_shape_are_rejected_with_a_reason(doc: dict[str, Any]) -> None:
    decoded = decode_logs(json.dumps(doc).encode(), JSON, "otlp")
    assert decoded.logs == [] and decoded.rejected >= 1 and decoded.rejection_message()


def test_an_integer_past_the_digit_limit_is_a_json_error() -> None:
    with pytest.raises(InputError, match="not valid JSON"):
        decode_traces(b'{"resourceSpans": [], "n": ' + b"7" * 5000 + b"}", JSON, "otlp")


@pytest.mark.parametrize(
    ("start", "words"),
    [("-1", "startTimeUnixNano"), (str(2**63), "startTimeUnixNano"), (1e400, "startTimeUnixNano")],
)
def test_times_the_store_cannot_hold_reject_the_span(start: object, words: str) -> None:
    span = tool_span("0000000000000001", "x")
    span.trace_id, span.start = "ab" * 16, start
    decoded = decode_traces(json_body([span]), JSON, "otlp")
    assert decoded.spans == [] and decoded.rejected == 1 and words in decoded.rejection_message()
    span.start = span.end = 2**64 - 1
    decoded = decode_traces(proto_body([span]), PROTOBUF, "otlp")
    assert decoded.spans == [] and decoded.rejected == 1 and "time" in decoded.rejection_message()


def test_names_ids_and_counts_the_store_cannot_hold_are_cleaned_or_ignored(tmp_path: Path) -> None:
    pipeline = Pipeline(CollectorConfig(db=str(tmp_path / "x.duckdb")))
    spans = [
        tool_span("0000000000000001", "ok", **{"gen_ai.tool.name": "na\ud800me", "gen_ai.tool.call.id": "\udfff",
                                               "gen_ai.tool.call.arguments": "{\"q\": \"\ud83d\"}",
                                               "toolmeter.raw.bytes": 2**70, "toolmeter.budget.tokens": 2**64}),
        tool_span("0000000000000002", "x", **{"toolmeter.raw.bytes": MAX_INT64}),
        Span("0000000000000003", "chat m", {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 2**70,
                                            "gen_ai.input.messages": [{"parts": [{"type": "tool_call_response",
                                                                                  "id": "\ud800", "response": b"\xff"}]}],
                                            "langfuse.observation.usage_details": {"input": 1e300}}),
        Span("0000000000000004", "x", {"toolmeter.tool.name": "t", "toolmeter.retained": "0-99999999999999999999999",
                                       "toolmeter.truncated": True}),
    ]  # fmt: skip
    for s in spans:
        s.trace_id = "ab" * 16
    spans[0].status = {"code": 2, "message": "bro\udc00ken"}
    ingest(pipeline, json_body(spans, {"service.name": "svc\ud800"}), JSON)  # raised in the store's Arrow conversion
    with read_connection(pipeline.config.db) as con:
        rows = con.execute(
            "SELECT tool_name, tool_call_id, service_name, error, arguments, raw_bytes, budget_tokens, raw_tokens, "
            "retained_ranges, warnings FROM tool_calls ORDER BY span_id"
        ).fetchall()
        llm = con.execute("SELECT input_tokens FROM llm_calls").fetchall()
        views = con.execute("SELECT tool_call_id FROM message_views").fetchall()
    first, second, fourth = rows
    assert first[:7] == ("na\ufffdme", "\ufffd", "svc\ufffd", "bro\ufffdken", '{"q": "\ufffd"}', 2, None)
    assert any("surrogate" in w for w in first[9]) and any("64-bit" in w for w in first[9])
    assert second[5] == MAX_INT64 and second[7] <= MAX_INT64
    assert fourth[8] == [[0, MAX_INT64]] and any("clipped" in w for w in fourth[9])
    assert llm == [(None,)] and views == [("\ufffd",)]


def test_tool_responses_of_any_shape_are_read_without_raising() -> None:
    from collector.dialects.messages import tool_responses

    huge = "9" * 5000  # int() refuses more than 4300 digits
    attrs = {f"llm.input_messages.{huge}.message.role": "tool", f"llm.input_messages.{huge}.message.tool_call_id": "c",
             "llm.input_messages.0.message.role": "tool", "llm.input_messages.0.message.tool_call_id": "c\ud800",
             "llm.input_messages.0.message.content": [b"\xff", math.nan]}  # fmt: skip
    got = [(r.call_id, r.text) for r in tool_responses(attrs)]
    assert got == [("c\ufffd", json.dumps([str(b"\xff"), math.nan]))]  # bytes as their repr
    assert tool_responses({"gen_ai.input.messages": [{"parts": 5}, {"parts": [{"type": "tool_call_response"}]}]}) == []


def test_a_span_the_classifier_cannot_hash_does_not_wedge_the_receiver(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    odd = tool_span("0000000000000001", "x")
    odd.trace_id = "ab" * 16
    odd.attrs["gen_ai.operation.name"] = ["chat"]  # classify() raised TypeError: the writer retried forever
    good = tool_span("0000000000000002", "after")
    good.trace_id = "cd" * 16
    assert post(f"{r.url}/v1/traces", json_body([odd]), JSON)[0] == 200
    assert post(f"{r.url}/v1/traces", json_body([good]), JSON)[0] == 200
    assert r.receiver.flush(timeout_s=30)
    with read_connection(db_path) as con:
        assert con.execute("SELECT trace_id, span_id FROM tool_calls").fetchall() == [("cd" * 16, good.span_id)]
