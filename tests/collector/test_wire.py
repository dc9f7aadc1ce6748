"""A large protobuf request read a piece at a time: the same spans, in the same order, and the
same problems at the same places, as the request read whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from collector.decode.files import read_file
from collector.decode.request import PROTOBUF, decode_traces
from collector.decode.wire import WireError, request_pieces
from collector.errors import InputError
from collector.model import Issue, SpanData

_START = 1_763_800_000_000_000_000


def _request(shape: list[list[list[int]]], bad: set[int] = frozenset()) -> bytes:  # type: ignore[assignment]
    """A ``TracesData``: ``shape[r][s]`` lists the result sizes of scope ``s`` of resource ``r``'s
    spans; the spans numbered in ``bad`` have a 15-byte trace id (rejected)."""
    data = TracesData()
    n = 0
    for r, scopes in enumerate(shape):
        rs = data.resource_spans.add(schema_url=f"https://schema/{r}")
        rs.resource.attributes.add(key="service.name").value.string_value = f"agent-{r}"
        for s, sizes in enumerate(scopes):
            ss = rs.scope_spans.add(schema_url="https://scope")
            ss.scope.name = f"scope-{r}-{s}"
            for size in sizes:
                n += 1
                span = ss.spans.add(name=f"execute_tool t{n}", span_id=n.to_bytes(8, "big"))
                span.trace_id = n.to_bytes(15 if n in bad else 16, "big")
                span.start_time_unix_nano, span.end_time_unix_nano = _START + n, _START + n + 5
                for key, value in (("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", f"t{n % 3}"),
                                   ("gen_ai.tool.call.result", "x" * size)):  # fmt: skip
                    span.attributes.add(key=key).value.string_value = value
    return data.SerializeToString()


def _pieced(data: bytes, limit: int) -> tuple[list[SpanData], list[str], list[bytes]]:
    spans: list[SpanData] = []
    problems: list[str] = []
    pieces = []
    for piece, origin in request_pieces(data, limit):
        decoded = decode_traces(piece, PROTOBUF, "f.pb", origin)
        spans += decoded.spans
        problems += [i.message for i in decoded.issues]
        pieces.append(piece)
    return spans, problems, pieces


_shapes = st.lists(st.lists(st.lists(st.integers(0, 900), max_size=12), max_size=4), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(shape=_shapes, limit=st.integers(1, 6000), bad=st.sets(st.integers(1, 60), max_size=5))
def test_pieces_hold_the_spans_and_the_problems_of_the_whole_request(shape, limit: int, bad: set[int]) -> None:  # type: ignore[no-untyped-def]
    data = _request(shape, bad)
    whole = decode_traces(data, PROTOBUF, "f.pb")
    spans, problems, pieces = _pieced(data, limit)
    assert spans == whole.spans
    assert problems == [i.message for i in whole.issues]
    for piece in pieces:  # each is a request of about the limit, or of one span only
        assert len(piece) <= limit + 400 or sum(len(ss.spans) for rs in TracesData.FromString(piece).resource_spans
                                                for ss in rs.scope_spans) <= 1  # fmt: skip


def test_a_resource_larger_than_a_piece_is_cut_by_its_scopes_and_spans_with_its_place_kept() -> None:
    data = _request([[[10, 10]], [[3000, 3000], [10, 10, 10], [3000]], [[10]]], bad={4})
    origins = [origin for _, origin in request_pieces(data, 4000)]
    assert origins == [(0, 0, 0), (1, 0, 0), (1, 0, 1), (1, 1, 0), (2, 0, 0)]  # scopes 1 and 2 fit one piece
    spans, problems, _ = _pieced(data, 4000)
    assert problems == [
        "resource_spans[1].scope_spans[0].spans[1] has a trace_id of 15 bytes and a span_id of 8 bytes "
        "(OTLP requires 16 and 8); span rejected"
    ]
    assert [s.resource["service.name"] for s in spans] == ["agent-0"] * 2 + ["agent-1"] * 5 + ["agent-2"]


def test_a_request_that_is_not_well_formed_is_named_where_it_breaks() -> None:
    data = _request([[[10]], [[10]]])
    with pytest.raises(WireError, match="runs past the end of its message at byte"):
        list(request_pieces(data[:-3], 10))
    with pytest.raises(WireError, match="wire type 3"):
        list(request_pieces(b"\x0b", 10))


def test_a_large_file_reads_as_the_whole_request_does(tmp_path: Path) -> None:
    data = _request([[[200_000] * 20, [10] * 5], [[300_000] * 20]], bad={3})  # ~10 MB, over two pieces
    path = tmp_path / "big.pb"
    path.write_bytes(data)
    issues: list[Issue] = []
    spans = list(read_file(str(path), issues))
    whole = decode_traces(data, PROTOBUF, str(path))
    assert spans == whole.spans and len(spans) == 44
    assert issues == whole.issues and len(issues) == 1


def test_a_cut_or_damaged_large_file_keeps_what_reads_and_says_what_did_not(tmp_path: Path) -> None:
    data = _request([[[1_500_000] * 2], [[1_500_000] * 2], [[1_500_000] * 2]])  # a piece a resource
    cut = tmp_path / "cut.pb"
    cut.write_bytes(data[: len(data) * 5 // 6])
    issues: list[Issue] = []
    assert len(list(read_file(str(cut), issues))) == 4
    assert [i.level for i in issues] == ["error"]
    assert "the request is damaged or cut short (field 1 runs past the end of its message at byte" in issues[0].message
    damaged = bytearray(data)
    at = data.index(b"execute_tool t3")  # proto3 strings are UTF-8: the official parser refuses this one
    damaged[at : at + 4] = b"\xff\xfe\xfd\xfc"
    path = tmp_path / "damaged.pb"
    path.write_bytes(bytes(damaged))
    issues = []
    assert [s.name for s in read_file(str(path), issues)] == [f"execute_tool t{n}" for n in (1, 2, 5, 6)]
    assert [i.level for i in issues] == ["error"]
    assert issues[0].message.startswith("the part from resource_spans[1].scope_spans[0].spans[0] is not readable")
    first = bytearray(data)
    at = data.index(b"execute_tool t1")
    first[at : at + 4] = b"\xff\xfe\xfd\xfc"
    path.write_bytes(bytes(first))
    with pytest.raises(InputError, match="neither JSON nor an OTLP protobuf"):  # the first piece: as a whole request
        list(read_file(str(path), []))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 3000), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
       limit=st.integers(1, 3000))  # fmt: skip
def test_a_damaged_request_gives_pieces_or_a_wire_error_and_a_file_reads_or_is_an_input_error(
    tmp_path: Path, cut: int, flips: list[tuple[int, int]], limit: int
) -> None:
    data = bytearray(_request([[[300, 10], [700]], [[10] * 6]], bad={2}))
    for at, byte in flips:
        data[at % len(data)] = byte
    damaged = bytes(data[: max(1, len(data) - cut)])
    try:
        for piece, _ in request_pieces(damaged, limit):
            assert isinstance(piece, bytes) and piece
    except WireError:
        pass
    path = tmp_path / "damaged.pb"
    path.write_bytes(damaged)
    issues: list[Issue] = []
    try:
        spans = list(read_file(str(path), issues))
    except InputError:
        return
    assert all(isinstance(s, SpanData) for s in spans) and all(isinstance(i, Issue) for i in issues)
