"""collector.decode.json_value.loads gives what json.loads gives: values, types and errors; the
OTLP/JSON readers (HTTP bodies, trace files) that parse with it read what json.loads would."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.decode import json_value
from collector.decode.files import read_file
from collector.decode.request import JSON, decode_traces
from collector.errors import InputError
from collector.measure.shape import schema_of
from collector.model import Issue

scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # of any size: past 64 bits they must stay ints
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=40,
)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True in Python)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (a == b and math.copysign(1, a) == math.copysign(1, b)) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def _outcome(parse: Any, text: str | bytes) -> tuple[str, Any]:
    try:
        return "value", parse(text)
    except RecursionError:
        return "RecursionError", None
    except ValueError as e:
        return type(e).__name__, str(e)


@settings(max_examples=400, deadline=None)
@given(values, st.booleans(), st.sampled_from([None, 2]))
def test_generated_json_parses_to_the_same_values_and_types(value: Any, ascii_only: bool, indent: int | None) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert _same(json_value.loads(text), json.loads(text))


@settings(max_examples=400, deadline=None)
@given(
    values, st.integers(min_value=0, max_value=200), st.sampled_from(['"', ",", "]", "}", "\n", "\\", "x", "NaN", "-"])
)
def test_near_json_is_accepted_or_refused_as_json_loads_does(value: Any, at: int, insert: str) -> None:
    text = json.dumps(value)
    broken = text[: at % (len(text) + 1)] + insert + text[at % (len(text) + 1) :]
    ours, theirs = _outcome(json_value.loads, broken), _outcome(json.loads, broken)
    assert ours[0] == theirs[0] and (ours[0] != "value" or _same(ours[1], theirs[1]))
    assert ours == theirs or ours[0] == "value"  # the same error message, too


@pytest.mark.parametrize(
    "text",
    [
        "[NaN, Infinity, -Infinity]",  # msgspec refuses them; json.loads answers
        "[1e999, -1E400]",  # past a double: inf
        "[123456789012345678901234567890, -9999999999999999999, 18446744073709551616]",
        '["\\ud800", "\\udfff x"]',  # escaped lone surrogates
        '{"a": 1, "b": 2, "a": 3}',  # the last of repeated keys, in the first one's place
        "[-0.0, 0.1, 5e-324, 1.7976931348623157e308, 9007199254740993]",
        " [1] \n",
        "\ud800",  # a lone surrogate in the text itself: not JSON either way
        '["\ud800 raw"]',  # ... and inside a string: JSON to json.loads
        '["\x00"]',
        "[1,]",
        "\ufeff[1]",
        "",
    ],
)
def test_edge_cases_match_json_loads(text: str) -> None:
    ours, theirs = _outcome(json_value.loads, text), _outcome(json.loads, text)
    assert ours[0] == theirs[0]
    if ours[0] == "value":
        assert _same(ours[1], theirs[1])
    else:
        assert ours == theirs


def test_deep_nesting_is_a_recursion_error_or_a_value_as_with_json_loads() -> None:
    for depth in (500, 5_000, 200_000):
        text = "[" * depth + "]" * depth
        assert _outcome(json_value.loads, text)[0] == _outcome(json.loads, text)[0]


def test_bytes_are_left_to_json_loads_which_detects_their_encoding() -> None:
    assert json_value.loads('{"k": "é"}'.encode("utf-16")) == {"k": "é"}


def test_a_big_integer_keeps_its_fingerprint_type() -> None:
    # a float here would read as a changed schema ($[].id:number)
    _, fields, _ = schema_of(json_value.loads('[{"id": 123456789012345678901234567890}]'))
    assert fields == ["$:array", "$[].id:integer", "$[]:object"]


def _request(value: str) -> str:
    """An OTLP/JSON request of one tool span whose attribute ``x`` is the JSON text ``value``."""
    return (
        '{"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [{"traceId": "' + "ab" * 16 + '", '
        '"spanId": "' + "cd" * 8 + '", "name": "execute_tool t", "startTimeUnixNano": "1", "endTimeUnixNano": "2", '
        '"attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "t"}}, '
        '{"key": "x", "value": {"doubleValue": ' + value + "}}]}]}]}]}"
    )


def test_otlp_json_bodies_and_lines_read_what_json_loads_reads(tmp_path: Path) -> None:
    # NaN, which msgspec refuses and json.loads takes, and a number past a double's range
    for value, want in (("NaN", math.isnan), ("1e999", math.isinf), ("2.5", lambda v: v == 2.5)):
        body = _request(value)
        span = decode_traces(body.encode(), JSON, "otlp").spans[0]
        assert want(span.attributes["x"]), value
        path = tmp_path / f"{value}.jsonl"
        path.write_text(body + "\n" + body + "\n")
        issues: list[Issue] = []
        spans = list(read_file(str(path), issues))
        assert len(spans) == 2 and all(want(s.attributes["x"]) for s in spans) and not issues, value
    with pytest.raises(InputError, match=r"line 1, column 20: Expecting value"):
        decode_traces(b'{"resourceSpans": [', JSON, "otlp")
