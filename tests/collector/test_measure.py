import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.measure.measurement import (
    Measurement,
    Size,
    clean_declared_ranges,
    infer_retained,
    infer_shape,
    measure,
    parse_json,
    parse_ranges,
    schema_of,
)
from collector.measure.shape import schema_by_every_value
from collector.measure.tokens import get_encoding
from collector.model import ToolCall
from tests.conftest import realworld


def call(**kw) -> ToolCall:  # type: ignore[no-untyped-def]
    base = dict(trace_id="a" * 32, span_id="b" * 16, tool_name="t", dialect="gen_ai", start_ns=1, end_ns=2)
    base.update(kw)
    return ToolCall(**base)  # type: ignore[arg-type]


# --- retained ranges on real payloads ------------------------------------------------


def test_real_raw_html_and_extracted_markdown_pair_is_inferred_truncated(counter) -> None:  # type: ignore[no-untyped-def]
    raw = realworld("holmesgpt__internet-toolset-fixture4__github_page_input.html")
    view = realworld("holmesgpt__internet-toolset-fixture4__github_page_output.md")
    row = measure(call(raw=raw, view=view), counter).row()
    assert row["truncated"] is True and row["truncation_source"] == "inferred"
    assert row["raw_bytes"] == len(raw) and row["view_bytes"] == len(view)
    assert row["view_tokens"] < row["raw_tokens"] / 10
    assert row["retained_source"] == "inferred"
    assert row["retained_ranges"], "pieces of the page text are found in the HTML"
    for start, end in row["retained_ranges"]:
        assert raw[start:end] in view  # every retained range really is in the view
    assert row["omitted_bytes"] is not None and row["omitted_bytes"] > 0.9 * len(raw)
    assert row["shape"] == "document"


def test_head_and_tail_cut_of_a_real_log_is_found_exactly(counter) -> None:  # type: ignore[no-untyped-def]
    raw = realworld("holmesgpt__fetch_pod_logs__52_logs_login_issues.txt")
    head_end = raw.index(b"\n", 20_000) + 1
    tail_start = raw.index(b"\n", len(raw) - 15_000) + 1
    view = raw[:head_end] + b"... [1,160,000 bytes omitted] ...\n" + raw[tail_start:]
    row = measure(call(raw=raw, view=view), counter).row()
    assert row["retained_ranges"] == [[0, head_end], [tail_start, len(raw)]]
    assert row["truncation_kind"] == "head_tail"
    assert row["omitted_bytes"] == tail_start - head_end
    assert row["shape"] == "diagnostic"


def test_view_equal_to_raw_is_not_truncated(counter) -> None:  # type: ignore[no-untyped-def]
    raw = realworld("kubectl-neat__fixtures__list1-raw__kubectl_get_pods_o_json.json")
    row = measure(call(raw=raw, view=raw), counter).row()
    assert row["truncated"] is False
    assert row["retained_ranges"] == [[0, len(raw)]]


def test_a_view_that_is_the_raw_is_counted_once_and_a_cut_raw_is_not_taken_for_its_view(counter, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    raw = realworld("kubectl-neat__fixtures__list1-raw__kubectl_get_pods_o_json.json").decode()
    texts: list[str] = []
    count = counter.count

    def counting(text: str):  # type: ignore[no-untyped-def]
        texts.append(text)
        return count(text)

    monkeypatch.setattr(counter, "count", counting)  # the counter is shared by the session's tests
    row = measure(call(raw=raw, view=raw), counter).row()
    assert row["view_tokens"] == row["raw_tokens"] == len(get_encoding("o200k_base").encode_ordinary(raw))
    assert row["view_bytes"] == row["raw_bytes"] and len(texts) == 1
    # received cut (an attribute limit): the raw's tokens are an estimate, the view's a count of its own
    cut = measure(call(raw=raw, view=raw, raw_bytes_declared=len(raw) * 2), counter).row()
    assert cut["raw_tokens_exact"] is False and cut["view_tokens_exact"] is True
    assert cut["view_tokens"] == row["view_tokens"] and len(texts) == 3


def test_no_view_means_the_model_saw_the_raw(counter) -> None:  # type: ignore[no-untyped-def]
    row = measure(call(raw="hello world"), counter).row()
    assert row["view_source"] == "raw"
    assert row["view_tokens"] == row["raw_tokens"] == 2
    assert row["truncated"] is None


def test_reordered_pieces_are_found() -> None:
    raw = b"".join(f"line {i:04d} of the result with some text\n".encode() for i in range(100))
    view = raw[3000:3200] + b"\n[...]\n" + raw[0:300]
    ret = infer_retained(raw, view)
    assert list(ret.ranges) == [(3000, 3200), (0, 300)]  # in view order
    assert ret.retained_bytes == 500


def test_repetitive_text_prefers_the_occurrence_that_matches_longest() -> None:
    raw = b"".join(f"INFO request served path=/api/v1/items status=200 id={i:05d}\n".encode() for i in range(500))
    start = raw.index(b"INFO", 20_000)
    view = raw[start : start + 600]
    assert list(infer_retained(raw, view).ranges) == [(start, start + 600)]


# --- declared values ------------------------------------------------------------------------


def test_declared_ranges_are_validated() -> None:
    ranges, warnings = clean_declared_ranges(((0, 10), (5, 20), (30, 25), (90, 200)), raw_len=100)
    assert ranges == [(0, 20), (90, 100)]
    assert any("reversed" in w for w in warnings)
    assert any("clipped" in w for w in warnings)
    assert any("overlap" in w for w in warnings)


def test_parse_ranges() -> None:
    assert parse_ranges("0-10, 20-30") == ((0, 10), (20, 30))
    assert parse_ranges("[[1, 2]]") == ((1, 2),)
    with pytest.raises(ValueError, match="'a-b' is not a byte range"):
        parse_ranges("0-1,a-b")


def test_declared_truncation_with_ranges_but_no_view_counts_the_retained_bytes(counter) -> None:  # type: ignore[no-untyped-def]
    raw = "word " * 1000
    row = measure(call(raw=raw, truncated=True, retained=((0, 500),), budget_tokens=200), counter).row()
    assert row["view_source"] == "retained"
    assert row["view_bytes"] == 500
    assert row["truncated"] is True and row["truncation_source"] == "declared"
    assert row["over_budget"] is True and row["view_over_budget"] is False
    assert row["omitted_bytes"] == len(raw) - 500


def test_declared_raw_size_larger_than_the_payload_is_said(counter) -> None:  # type: ignore[no-untyped-def]
    row = measure(call(raw="x " * 64, raw_bytes_declared=1_000_000), counter).row()
    assert row["raw_bytes"] == 1_000_000
    assert row["raw_tokens_exact"] is False
    assert any("cut before toolmeter saw it" in w for w in row["warnings"])


# --- shape and schema -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("holmesgpt__fetch_pod_logs__52_logs_login_issues.txt", "diagnostic"),
        ("holmesgpt__kubectl_get_by_kind_in_cluster__pods_all_namespaces.txt", "list"),
        ("holmesgpt__fetch_webpage__42_k8s_dns_debugging.txt", "document"),
        ("holmesgpt__internet-toolset-fixture4__github_page_input.html", "document"),
        ("kubectl-neat__fixtures__list1-raw__kubectl_get_pods_o_json.json", "list"),
        ("holmesgpt__list_prometheus_rules__158.txt", "record"),
        ("awslabs-mcp__aws-documentation-mcp-server__lambda_sns_raw.html", "document"),
    ],
)
def test_shapes_of_real_payloads(name: str, shape: str) -> None:
    text = realworld(name).decode()
    parsed, _ = parse_json(text)
    assert infer_shape(text, parsed) == shape


def test_fingerprint_is_stable_under_values_and_key_order() -> None:
    a = [{"id": 1, "status": "paid", "amount": 3.5, "note": None}]
    b = [{"amount": 99.0, "note": "late", "status": "refunded", "id": 7}, {"id": 8, "status": "x", "amount": 1.0}]
    assert schema_of(a)[0] == schema_of(b)[0]


def test_fingerprint_changes_when_a_scalar_becomes_an_object() -> None:
    assert schema_of([{"user": "octocat"}])[0] != schema_of([{"user": {"login": "octocat"}}])[0]


def test_fingerprint_changes_when_a_field_is_added() -> None:
    before = [{"id": 1, "status": "paid"}]
    after = [{"id": 1, "status": "paid", "raw_payload": "x" * 400}]
    fp1, fields1, _ = schema_of(before)
    fp2, fields2, _ = schema_of(after)
    assert fp1 != fp2
    assert sorted(set(fields2) - set(fields1)) == ["$[].raw_payload:string"]


def test_fingerprint_of_a_real_github_issues_payload_lists_nested_paths() -> None:
    parsed = json.loads(realworld("octokit-fixtures__api.github.com__paginate-issues__normalized-fixture.json"))
    _, fields, complete = schema_of(parsed)
    assert complete
    assert any(f.startswith("$[].") for f in fields)


# --- bad input ----------------------------------------------------------------------------------


def test_non_utf8_bytes_are_measured_and_said(counter) -> None:  # type: ignore[no-untyped-def]
    row = measure(call(raw=b"ok \xff\xfe broken"), counter).row()
    assert row["raw_bytes"] == 12
    assert any("not valid UTF-8" in w and "offset 3" in w for w in row["warnings"])


def test_binary_payload_is_flagged(counter) -> None:  # type: ignore[no-untyped-def]
    row = measure(call(raw=bytes(range(256)) * 4), counter).row()
    assert any("binary" in w for w in row["warnings"])


def test_json_nested_10000_deep_is_measured_without_a_fingerprint(counter) -> None:  # type: ignore[no-untyped-def]
    raw = "[" * 10_000 + "]" * 10_000
    row = measure(call(raw=raw), counter).row()
    assert row["raw_bytes"] == 20_000
    assert row["raw_tokens"] == len(get_encoding("o200k_base").encode_ordinary(raw))
    assert row["schema_fingerprint"] is None
    assert any("nested deeper" in w for w in row["warnings"])


@pytest.mark.slow
def test_a_100_mb_single_line_result_is_measured(counter) -> None:  # type: ignore[no-untyped-def]
    raw = ("error code=E1042 retry " * 4_400_000)[:100_000_000]  # one line, 100 MB
    row = measure(call(raw=raw), counter).row()
    assert row["raw_bytes"] == 100_000_000
    assert row["raw_tokens_exact"] is True
    assert row["raw_tokens"] > 10_000_000


# --- the Measurement ---------------------------------------------------------------------------

ROW_KEYS = [
    "trace_id", "span_id", "parent_span_id", "tool_call_id", "tool_name", "service_name", "agent_name", "dialect",
    "source", "start_ns", "end_ns", "duration_ms", "status", "error", "encoding", "raw_bytes", "raw_tokens",
    "raw_tokens_exact", "view_bytes", "view_tokens", "view_tokens_exact", "view_source", "budget_tokens",
    "over_budget", "view_over_budget", "truncated", "truncation_source", "truncation_kind", "retained_ranges",
    "retained_source", "retained_bytes", "retained_coverage", "omitted_bytes", "shape", "shape_source",
    "schema_fingerprint", "schema_fields", "arguments", "warnings", "raw_wrapper", "wrapper_bytes", "wrapper_tokens",
    "view_join", "origin", "token_counter", "handle", "items_total", "items_shown", "retained_items",
]  # fmt: skip


def test_measurement_is_typed_figures_with_the_row_of_store_columns(counter) -> None:  # type: ignore[no-untyped-def]
    raw = json.dumps({"items": [{"id": i, "name": f"n{i}"} for i in range(200)]})
    m = measure(call(raw=raw, view=raw[:900], budget_tokens=50), counter)
    assert isinstance(m, Measurement)
    with pytest.raises(AttributeError):  # slots: a misspelt figure cannot be added
        m.raw_tokens = 3  # type: ignore[attr-defined]
    assert m.raw == Size(len(raw), counter.count(raw).tokens, True)
    assert m.view.byte_count == 900 and m.view_source == "view"
    assert m.truncation.truncated is True and m.truncation.kind == "head"
    assert m.truncation.retained == ((0, 900),)
    assert m.shape.shape == "list" and m.shape.fields is not None
    assert m.over_budget is True and m.wrapper.name is None
    row = m.row()
    assert list(row) == ROW_KEYS
    assert row["retained_ranges"] == [[0, 900]] and row["schema_fields"] == list(m.shape.fields)
    assert m.payloads == {"raw": raw.encode(), "view": raw[:900].encode()}
    row["view_source"] = "message"  # callers change their row: a new dict every time
    assert m.row()["view_source"] == "view"


def test_a_measurements_row_is_a_new_dict_each_time(counter) -> None:  # type: ignore[no-untyped-def]
    m = measure(call(raw=b"some raw bytes here", view="some raw"), counter)
    first = m.row()
    first["raw_tokens"] = -1
    assert m.row()["raw_tokens"] == m.raw.tokens != -1


def test_helpers_stay_importable_from_measurement() -> None:
    from collector.measure import measurement, retention, shape, text

    assert measurement.infer_retained is retention.infer_retained
    assert measurement.MAX_INT64 == retention.MAX_INT64 == 2**63 - 1
    assert measurement.schema_of is shape.schema_of and measurement.infer_shape is shape.infer_shape
    assert measurement.without_surrogates is text.without_surrogates


@given(st.lists(st.sampled_from(["2026-12-02 06:00 INFO started", "ERROR boom", "  at handler (x.js:3)",
                                 "plain words", "", "| a | b |", "Traceback (most recent call last):"]),
                max_size=60))  # fmt: skip
def test_log_lines_are_decided_early_as_counting_them_all_would(lines: list[str]) -> None:
    from collector.measure.shape import _LOG_LINE, _mostly_log_lines

    assert _mostly_log_lines(lines) == (sum(1 for ln in lines if _LOG_LINE.match(ln)) >= max(3, len(lines) * 0.3))


def test_a_repeated_structure_gets_the_same_fingerprint_and_its_own_field_list() -> None:
    from collector.measure.shape import schema_of

    first = schema_of([{"id": 1, "status": "paid"}, {"id": 2, "status": None}])
    first[1].append("changed by the caller")
    again = schema_of([{"id": 7, "status": "late"}])
    assert again[0] == first[0] and "changed by the caller" not in again[1]
    assert schema_of([{"id": 7, "status": {"code": 1}}])[0] != first[0]  # a scalar turned object


_ROW_VALUES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.sampled_from(["a", "", "1"])
_JSON = st.recursive(
    _ROW_VALUES,
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(st.sampled_from(["id", "status", "42", "a"]), kids, max_size=4)
        # lists of rows: the same keys, values of repeating and of changing types, some nested
        | st.lists(st.fixed_dictionaries({"id": _ROW_VALUES}, optional={"s": _ROW_VALUES, "n": kids}), max_size=6)
    ),
    max_leaves=30,
)


@given(_JSON)
def test_the_fingerprint_walk_gives_what_visiting_every_value_gives(parsed: object) -> None:
    fingerprint, fields, complete = schema_of(parsed)
    assert (fingerprint, fields) == schema_by_every_value(parsed) and complete
    assert schema_of(parsed) == (fingerprint, fields, True)  # again: from the memo when it has a signature


def test_structures_alike_but_for_a_type_a_key_or_a_nested_list_get_their_own_answer() -> None:
    from collections import OrderedDict

    alike = [
        [{"id": 1, "s": "a"}, {"id": 2, "s": "b"}],
        [{"id": 1, "s": None}, {"id": 2, "s": "b"}],  # a null among the strings
        [{"id": True, "s": "a"}],  # a boolean is not an integer
        [{"s": "a", "id": 1}],  # the same keys in another order
        [{"id": 1, "s": ["a"]}],  # a list where a string was: walked
        [{"id": 1}, {"id": 2, "s": "b"}],  # rows of differing keys: walked
        [OrderedDict(id=1, s="a")],  # a subclass of dict: walked
        {"items": [{"id": 1, "s": "a"}], "total": 1},
        {"items": [{"id": 1, "s": "a"}], "total": None},
        {"items": [], "total": 1},
        {"items": [1, 2.5], "total": 1},
        [],
        {},
        [[1], [2]],
    ]
    for parsed in alike * 2:  # the second pass answers from the memo
        fingerprint, fields, complete = schema_of(parsed)
        assert (fingerprint, fields) == schema_by_every_value(parsed) and complete


def test_the_column_walk_gives_the_row_walk_answer_for_mixed_rows_and_subclasses() -> None:
    from collections import OrderedDict

    rows = [
        {"id": 1, "tags": ["a", "b"], "user": {"login": "x", "site": {"url": "u"}}},
        {"tags": [], "id": 2, "user": {"login": "y", "site": None}},  # the same keys in another order
        {"id": 3, "tags": [1, {"k": True}], "user": None, "extra": 1.5},
        OrderedDict(id=4, tags=["c"], user={"login": "z"}),  # a dict subclass: walked one by one
        [1, 2],
        "not a row",
    ]
    fingerprint, fields, complete = schema_of(rows)
    assert (fingerprint, fields) == schema_by_every_value(rows) and complete
    assert "$[].user.site.url:string" in fields and "$[].tags[].k:boolean" in fields


def test_a_walk_cut_at_the_node_limit_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from collector.measure import shape

    monkeypatch.setattr(shape, "MAX_SCHEMA_NODES", 50)
    rows = [{"id": i, "name": "n", "nested": [{"a": i}]} for i in range(40)]
    _, fields, complete = shape.schema_of(rows)
    assert not complete and set(fields) <= set(schema_by_every_value(rows)[1])
    _, _, complete = shape.schema_of(rows[:5])
    assert complete
