"""The OpenTelemetry Collector file exporter's length-prefixed layouts, as its writer lays them out
(``exporter/fileexporter``: a 4-byte big-endian length before each message; ``format: proto``
writes ``TracesData``; ``compression: zstd`` compresses each message into a frame of its own;
the native-compression gate makes the whole file one zstd stream)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from collector.cli import main
from collector.decode.files import read_file
from collector.errors import InputError
from collector.model import Issue, SpanData
from collector.store.database import read_connection
from tests.collector.test_ingest_cli import otlp, tool


def _json(i: int) -> bytes:
    """The OTLP/JSON request of tool span ``i`` (its own trace), as the Collector's JSON marshaler writes it."""
    return json.dumps(otlp(tool(i, f"result {i}", trace=f"{i:032x}")), separators=(",", ":")).encode()


def _proto(i: int) -> bytes:
    """The same request as a protobuf ``TracesData``, as ``format: proto`` writes it."""
    from google.protobuf.json_format import Parse

    data = Parse(_json(i), TracesData())
    span = data.resource_spans[0].scope_spans[0].spans[0]  # OTLP/JSON ids are hex, protobuf's JSON base64
    span.trace_id, span.span_id = bytes.fromhex(f"{i:032x}"), bytes.fromhex(f"{i:016x}")
    return data.SerializeToString()


def _framed(messages: list[bytes]) -> bytes:
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def _read(path: Path) -> tuple[list[SpanData], list[Issue]]:
    issues: list[Issue] = []
    return list(read_file(str(path), issues)), issues


def _ids(spans: list[SpanData]) -> list[tuple[str, str]]:
    return [(s.span_id, s.source) for s in spans]


@pytest.mark.parametrize(
    "layout",
    ["proto", "proto, zstd", "json, zstd", "proto, zstd stream", "json lines, zstd stream", "proto, zstd frames"],
)
def test_each_layout_reads_every_message_named_by_its_number(tmp_path: Path, layout: str) -> None:
    messages = [_proto(i) if layout.startswith("proto") else _json(i) for i in range(1, 4)]
    if layout in ("proto, zstd", "json, zstd"):  # the exporter's compression: a frame a message
        data = _framed([_zstd(m) for m in messages])
    elif layout == "json lines, zstd stream":  # the native-compression gate, format json
        data = _zstd(b"\n".join(messages) + b"\n")
    elif layout == "proto, zstd frames":  # native compression with rotation: a frame a write
        data = b"".join(_zstd(_framed([m])) for m in messages)
    elif layout == "proto, zstd stream":
        data = _zstd(_framed(messages))
    else:
        data = _framed(messages)
    path = tmp_path / "traces.out"
    path.write_bytes(data)
    spans, issues = _read(path)
    assert _ids(spans) == [(f"{i:016x}", f"{path}:{i}") for i in range(1, 4)]
    assert [s.attributes["gen_ai.tool.call.result"] for s in spans] == ["result 1", "result 2", "result 3"]
    assert issues == []


def test_messages_are_read_as_the_file_grows_and_one_message_is_named_by_the_file(tmp_path: Path) -> None:
    path = tmp_path / "traces.pb"
    path.write_bytes(_framed([_proto(1), _proto(2)]))
    issues: list[Issue] = []
    spans = read_file(str(path), issues)
    first = next(spans)
    with open(path, "ab") as f:  # the exporter appends while the file is read
        f.write(_framed([_proto(3)]))
    assert [s.span_id for s in [first, *spans]] == [f"{i:016x}" for i in range(1, 4)]
    one = tmp_path / "one.pb"
    one.write_bytes(_framed([_proto(1)]))
    assert _ids(_read(one)[0]) == [(f"{1:016x}", str(one))]


def test_a_bad_message_is_an_issue_and_a_cut_one_ends_the_file_with_the_spans_before_kept(tmp_path: Path) -> None:
    path = tmp_path / "traces.pb"
    bad = _zstd(b"\x00\xff\x13 not a request")
    cut = _framed([_proto(4)])[:-3]  # the exporter was writing it
    path.write_bytes(_framed([_proto(1), bad, _proto(3)]) + cut)
    spans, issues = _read(path)
    assert [s.span_id for s in spans] == [f"{1:016x}", f"{3:016x}"]
    assert [(i.source, i.level) for i in issues] == [(str(path), "error")] * 2
    assert issues[0].message.startswith("message 2 is not an OTLP request (body is not a protobuf")
    assert "message 4: the file ends inside a message" in issues[1].message and "cut short?" in issues[1].message


def test_length_prefixed_messages_of_another_compression_are_named_with_what_to_set(tmp_path: Path) -> None:
    path = tmp_path / "traces.snappy"
    path.write_bytes(_framed([b"\xff\x06\x00\x00sNaPpY" + bytes(range(40)), b"\x04\x08\x4d\x18" + bytes(30)]))
    with pytest.raises(InputError, match=r"traces.snappy: length-prefixed messages .* snappy or lz4 compression"):
        _read(path)


def test_plain_and_compressed_single_requests_are_still_read_whole(tmp_path: Path) -> None:
    for name, data in (("one.pb", _proto(1)), ("one.pb.zst", _zstd(_proto(1))), ("one.json.zst", _zstd(_json(1)))):
        path = tmp_path / name
        path.write_bytes(data)
        assert _ids(_read(path)[0]) == [(f"{1:016x}", str(path))], name


def test_ingest_stores_a_file_exporter_proto_file(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "traces.pb"
    path.write_bytes(_framed([_zstd(_proto(i)) for i in range(1, 6)]))
    assert main(["ingest", str(path), "--db", db_path, "--no-alerts"]) == 0
    said = capsys.readouterr()
    assert f"{path}: 5 tool/LLM spans" in said.err and "5 tool calls" in said.out
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*), count(DISTINCT trace_id) FROM tool_calls").fetchone() == (5, 5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 400), flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
       compressed=st.booleans())  # fmt: skip
def test_a_damaged_file_reads_or_is_an_input_error(tmp_path: Path, cut: int, flips: list, compressed: bool) -> None:  # type: ignore[type-arg]
    data = bytearray(_framed([_zstd(_proto(i)) if compressed else _proto(i) for i in range(1, 4)]))
    for at, byte in flips:
        data[at % len(data)] = byte
    path = tmp_path / "damaged.pb"
    path.write_bytes(bytes(data[: len(data) - cut]))
    try:
        spans, issues = _read(path)
    except InputError:
        return
    assert all(isinstance(s, SpanData) for s in spans) and all(isinstance(i, Issue) for i in issues)
