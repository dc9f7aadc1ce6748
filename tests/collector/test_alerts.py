"""Change-point detection, rules files, and the `check` gate, on generated histories."""

from __future__ import annotations

import json
import random
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from collector.alerts.detection import Alert
from collector.alerts.evaluation import evaluate as evaluate_all
from collector.alerts.evaluation import list_alerts, set_state
from collector.alerts.rules import Rule, Rules, RulesError, parse_rules
from collector.cli import main
from collector.store.database import Store

DAY0 = datetime(2026, 11, 1)
OLD = ["$:array", "$[]:object", "$[].id:integer", "$[].status:string"]
NEW = [*OLD, "$[].raw_payload:string"]


def history(db: str, days: list[tuple[str, list[str], int, float]], tool: str = "search_orders", per_day: int = 12,
            seed: int = 7) -> None:  # fmt: skip
    """One (fingerprint, fields, median view tokens, over-budget share) per day."""
    Store(db).ensure_schema()
    rng = random.Random(seed)
    con = duckdb.connect(db)
    rows = []
    for d, (fp, fields, tokens, over) in enumerate(days):
        for i in range(per_day):
            start = DAY0 + timedelta(days=d, minutes=10 * i)
            view = max(1, int(rng.gauss(tokens, tokens * 0.05)))
            rows.append(
                (f"{d:04d}{i:028d}", f"{d:08d}{i:08d}", tool, start, view, view * 3, rng.random() < over, fp, fields)
            )
    con.executemany(
        """INSERT INTO tool_calls (trace_id, span_id, tool_name, start_time, start_ns, end_ns, view_tokens, raw_tokens,
                                   over_budget, schema_fingerprint, schema_fields, status, later_llm_calls)
           VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, 'ok', 2)""",
        rows,
    )
    con.close()


def evaluate(db: str, rules: Rules) -> list[Alert]:
    """The tool alerts of an evaluation (each generated call here is a run of its own, so the
    runs grow with the calls: run-size alerts are tested below)."""
    return [a for a in evaluate_all(db, rules) if a.kind != "run_growth"]


def kinds(db: str) -> list[tuple[str, str]]:
    return [(a["kind"], str(a["change_at"])[:10]) for a in list_alerts(db) if a["kind"] != "run_growth"]


def test_growth_after_a_schema_change_names_the_added_field(db_path: str) -> None:
    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("B", NEW, 2200, 0.3)] * 7)
    (alert,) = evaluate(db_path, Rules())
    assert alert.kind == "schema_change" and str(alert.change_at)[:10] == "2026-11-08"
    assert alert.schema["added"] == ["$[].raw_payload:string"]
    assert alert.findings[0].metric == "view_tokens_p99" and alert.findings[0].ratio > 1.5
    stored = list_alerts(db_path)[0]
    assert stored["state"] == "open" and "raw_payload" in stored["summary"]
    ev = stored["evidence"]
    assert ev["before"]["calls"] == 84 and ev["after"]["calls"] == 84
    assert ev["examples"]["after"][0]["view_tokens"] > ev["examples"]["before"][0]["view_tokens"]
    assert evaluate(db_path, Rules()) == []  # evaluating again adds nothing
    set_state(db_path, stored["alert_id"], "acknowledged")
    assert list_alerts(db_path)[0]["state"] == "acknowledged"


def test_shrink_after_a_schema_change_does_not_alert(db_path: str) -> None:
    history(db_path, [("A", NEW, 2000, 0.2)] * 7 + [("B", OLD, 900, 0.0)] * 7)
    assert evaluate(db_path, Rules()) == []


def test_flapping_fingerprints_are_not_a_schema_change(db_path: str) -> None:
    days = (
        [("A", OLD, 1000, 0.0)] * 5 + [("B", NEW, 1000, 0.0), ("A", OLD, 1000, 0.0)] * 4 + [("A", OLD, 2500, 0.0)] * 5
    )
    history(db_path, days)
    alerts = evaluate(db_path, Rules())
    assert all(a.kind == "growth" for a in alerts)  # the growth is real, the schema change is not


def test_too_few_calls_give_no_verdict(db_path: str) -> None:
    history(db_path, [("A", OLD, 1000, 0.0)] * 3 + [("B", NEW, 3000, 0.5)] * 3, per_day=2)
    assert evaluate(db_path, Rules()) == []
    assert len(evaluate(db_path, Rules(defaults=Rule(min_calls=3)))) == 1


def test_growth_without_a_schema_change_is_labelled_as_such(db_path: str) -> None:
    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("A", OLD, 1800, 0.0)] * 7)
    (alert,) = evaluate(db_path, Rules())
    assert alert.kind == "growth" and str(alert.change_at)[:10] == "2026-11-08"
    assert "without a schema change" in alert.summary


def test_over_budget_rate_rule(db_path: str) -> None:
    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("B", NEW, 1100, 0.4)] * 7)
    (alert,) = evaluate(db_path, Rules())
    assert alert.findings[0].metric == "over_budget_rate"


def test_per_tool_thresholds(db_path: str) -> None:
    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("B", NEW, 1700, 0.0)] * 7)
    rules = parse_rules("[defaults]\np99_view_ratio = 1.5\n\n[tools.search_orders]\np99_view_ratio = 2.0\n")
    assert evaluate(db_path, rules) == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "[defaults]\np99_view_ratio = 1.5\np99_veiw_ratio = 2\n",
            "rules.toml:3: unknown key 'p99_veiw_ratio' in [defaults]",
        ),
        ("[defaults]\nmin_calls = 'many'\n", "rules.toml:2: min_calls in [defaults] must be a positive integer"),
        (
            "[tools.search_orders]\n\np99_view_ratio = -1\n",
            "rules.toml:3: p99_view_ratio in [tools.search_orders] must be a positive number",
        ),
        ("[defaults\n", "rules.toml: not valid TOML"),
        ("[alerts]\nx = 1\n", "unknown section or key 'alerts'"),
    ],
)
def test_rules_file_errors_name_line_and_key(text: str, words: str) -> None:
    with pytest.raises(RulesError) as e:
        parse_rules(text, "rules.toml")
    assert words in str(e.value)


def test_the_sample_traces_schema_change_is_found_on_the_right_day(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "demo.duckdb")
    assert main(["demo", "--db", db, "--no-dashboard"]) == 0
    assert "alert: toolmeter: search_orders envelope grew" in capsys.readouterr().out
    assert main(["alerts", "--db", db, "--json"]) == 0
    alert, runs = json.loads(capsys.readouterr().out)
    assert (alert["tool_name"], alert["kind"], alert["change_at"][:10]) == (
        "search_orders",
        "schema_change",
        "2026-11-16",
    )
    assert alert["evidence"]["schema"]["added"] == ["$[].raw_payload:string"]
    # the same change makes the support agent's runs half as large again: the run-size alert names
    # the service and the tool that grew
    assert (runs["kind"], runs["service_name"], runs["tool_name"], runs["change_at"][:10]) == (
        "run_growth", "support-agent", "search_orders", "2026-11-16")  # fmt: skip
    assert runs["summary"].startswith("toolmeter: runs of support-agent grew: tool-result tokens per run, median")
    grew = runs["evidence"]["tools_grew"]
    assert grew[0]["tool"] == "search_orders" and grew[0]["growth_per_run"] > 10_000
    assert runs["evidence"]["before"]["calls"] >= 20 and runs["evidence"]["after"]["calls"] >= 20  # runs, each side


def test_watch_once_evaluates_the_whole_store_and_says_what_it_found(db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("B", NEW, 2200, 0.3)] * 7)
    assert main(["watch", "--db", db_path, "--once"]) == 0
    said = capsys.readouterr().out
    assert "toolmeter: search_orders envelope grew: view_tokens_p99 " in said and "raw_payload" in said
    assert [a["kind"] for a in list_alerts(db_path) if a["kind"] != "run_growth"] == ["schema_change"]
    assert main(["watch", "--db", db_path + ".missing", "--once"]) == 1, "a scheduled run that could not evaluate"
    assert "toolmeter watch: no toolmeter store at " in capsys.readouterr().err


def test_check_exit_codes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    base, same, grown = (str(tmp_path / n) for n in ("base.duckdb", "same.duckdb", "grown.duckdb"))
    history(base, [("A", OLD, 1000, 0.0)] * 3, per_day=20)
    history(same, [("A", OLD, 1020, 0.0)] * 3, per_day=20, seed=8)
    history(grown, [("B", NEW, 2500, 0.0)] * 3, per_day=20, seed=9)
    assert main(["check", "--baseline", base, "--candidate", same]) == 0
    assert "passed" in capsys.readouterr().out
    assert main(["check", "--baseline", base, "--candidate", grown]) == 1
    out = capsys.readouterr().out
    assert "search_orders" in out and "view_tokens_p99" in out and "raw_payload" in out
    assert main(["check", "--baseline", base, "--candidate", grown, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False and report["failures"][0]["schema"]["added"] == ["$[].raw_payload:string"]
    assert main(["check", "--baseline", base, "--candidate", str(tmp_path / "missing")]) == 2
    (tmp_path / "bad.toml").write_text("[defaults]\nnope = 1\n")
    assert main(["check", "--baseline", base, "--candidate", same, "--rules", str(tmp_path / "bad.toml")]) == 2
    assert "bad.toml:2: unknown key 'nope'" in capsys.readouterr().err


def test_check_on_trace_files(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import SAMPLE_TRACES

    before = str(SAMPLE_TRACES / "traces-2026-11-10.json.gz")
    after = str(SAMPLE_TRACES / "traces-2026-11-17.json.gz")
    (tmp_path / "rules.toml").write_text("[defaults]\nmin_calls = 5\n")
    code = main(
        ["check", "--baseline", before, "--candidate", after, "--rules", str(tmp_path / "rules.toml"), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and {f["tool"] for f in report["failures"]} >= {"search_orders"}


def runs_history(db: str, days: list[dict[str, tuple[int, int]]], per_day: int = 24, service: str = "support") -> None:
    """Runs of one service: per day, tool -> (calls per run, median view tokens of a call)."""
    Store(db).ensure_schema()
    rng = random.Random(3)
    rows = []
    for d, tools in enumerate(days):
        for run in range(per_day):
            trace = f"{d:04d}{run:028d}"
            start = DAY0 + timedelta(days=d, minutes=30 * run)
            k = 0
            for tool, (calls, tokens) in tools.items():
                for _ in range(calls):
                    view = max(1, int(rng.gauss(tokens, tokens * 0.05)))
                    rows.append((trace, f"{k:016d}", tool, service, start + timedelta(seconds=k), view))
                    k += 1
    con = duckdb.connect(db)
    con.executemany(
        """INSERT INTO tool_calls (trace_id, span_id, tool_name, service_name, start_time, start_ns, end_ns,
                                   view_tokens, raw_tokens, status, later_llm_calls)
           VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, 'ok', 1)""",
        [(*r, r[-1]) for r in rows],
    )
    con.close()


def test_runs_that_call_a_tool_more_often_alert_where_no_tool_grew(db_path: str) -> None:
    """Each call stays the same size, so no tool alert: but the runs now loop on fetch_logs."""
    before = {"search": (1, 2000), "fetch_logs": (1, 1500), "lookup": (2, 100)}
    after = {"search": (1, 2000), "fetch_logs": (4, 1500), "lookup": (2, 100)}
    runs_history(db_path, [before] * 7 + [after] * 7)
    found = evaluate_all(db_path, Rules())
    (alert,) = found
    assert (alert.kind, alert.service, alert.tool_name, str(alert.change_at)[:10]) == (
        "run_growth", "support", "fetch_logs", "2026-11-08")  # fmt: skip
    assert [g["tool"] for g in alert.tools_grew] == ["fetch_logs"]
    assert alert.tools_grew[0]["growth_per_run"] == pytest.approx(4500, rel=0.05)
    assert alert.before.calls == 7 * 24 and alert.after.calls == 7 * 24  # runs on each side
    assert "runs of support grew" in alert.summary and "fetch_logs +4," in alert.summary
    (stored,) = list_alerts(db_path)
    assert stored["service_name"] == "support" and stored["evidence"]["tools_grew"][0]["tool"] == "fetch_logs"
    assert evaluate_all(db_path, Rules()) == []  # evaluating again adds nothing


def test_run_thresholds_per_service(db_path: str) -> None:
    runs_history(db_path, [{"search": (1, 2000)}] * 7 + [{"search": (2, 2000)}] * 7)
    assert evaluate_all(db_path, parse_rules("[services.support]\np99_run_ratio = 3.0\np50_run_ratio = 3.0\n")) == []
    assert len(evaluate_all(db_path, parse_rules("[services.other]\np99_run_ratio = 3.0\n"))) == 1


@pytest.mark.parametrize(
    ("tools", "days", "kept"),
    [(24, 80, False), (1, 800, True)],
    ids=["between-tools", "between-windows-of-one-tool"],
)
def test_a_writer_gets_in_while_alerts_are_evaluated(db_path: str, tools: int, days: int, kept: bool) -> None:
    """Between two tools' reads; with a memo (serve's, watch's), between two windows' too."""
    import threading
    import time

    from collector.alerts.memo import Memo
    from collector.store.connection import connect

    Store(db_path).ensure_schema()
    with duckdb.connect(db_path) as con:  # an evaluation that reads for seconds
        con.execute(f"""
            INSERT INTO tool_calls (trace_id, span_id, tool_name, start_time, start_ns, end_ns, view_tokens,
                                    raw_tokens, status, schema_fingerprint)
            SELECT lpad(to_hex(i), 32, '0'), lpad(to_hex(i), 16, '0'), 'tool' || (i % {tools}),
                   TIMESTAMP '2026-01-01' + to_minutes(i // {tools} * 30), 0, 0, 100 + i % 50, 300, 'ok', 'fp'
            FROM range({tools} * 48 * {days}) t(i)""")
    evaluated: list[float] = []

    def evaluation() -> None:
        evaluate_all(db_path, Rules(), memo=Memo() if kept else None)
        evaluated.append(time.monotonic())

    evaluating = threading.Thread(target=evaluation)
    started = time.monotonic()
    evaluating.start()
    time.sleep(0.5)
    asked = time.monotonic()
    con = connect(db_path, read_only=False, wait_s=120)  # this process's own writer, as serve's is
    try:
        con.execute("""INSERT INTO tool_calls (trace_id, span_id, tool_name, start_time, start_ns, end_ns, status)
                       VALUES ('f' || repeat('0', 31), 'f' || repeat('0', 15), 'written', '2025-10-01', 0, 0, 'ok')""")
    finally:
        con.close()
    written = time.monotonic()
    evaluating.join()
    took = evaluated[0] - started
    assert written - asked < took / 5, f"the write waited {written - asked:.1f} s of an evaluation of {took:.1f} s"


def test_a_stop_ends_an_evaluation_and_stores_nothing(db_path: str) -> None:
    import threading

    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("B", NEW, 2200, 0.3)] * 7)
    stop = threading.Event()
    stop.set()
    assert evaluate_all(db_path, Rules(), stop) == [], "stopped: nothing evaluated, nothing stored"
    assert list_alerts(db_path) == []
    assert len(evaluate(db_path, Rules())) == 1


def test_a_memo_reads_again_only_the_windows_whose_calls_changed(db_path: str) -> None:
    from collector.alerts.detection import detect
    from collector.alerts.memo import Memo
    from collector.alerts.runs import detect_run_growth
    from collector.store.connection import read_connection

    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("B", NEW, 2200, 0.3)] * 7 + [("B", NEW, 2200, 0.3)] * 3)
    runs_history(db_path, [{"search": (1, 2000)}] * 7 + [{"search": (3, 2000)}] * 7)
    rules = Rules()

    def found(memo: Memo | None) -> list[Alert]:
        with read_connection(db_path) as con:
            return detect(con, rules, None, memo) + detect_run_growth(con, rules, None, memo)

    memo = Memo()
    memo.start()
    first = found(memo)
    memo.finish()
    assert first == found(None) and {"schema_change", "run_growth"} <= {a.kind for a in first}
    read_first = memo.read
    memo.start()
    assert found(memo) == first and memo.read == 0, "nothing changed: every window kept"
    memo.finish()
    with duckdb.connect(db_path) as con:  # the last day of search_orders: its calls' later model calls counted again
        con.execute("UPDATE tool_calls SET later_llm_calls = 9 WHERE tool_name = 'search_orders' "
                    "AND start_time >= TIMESTAMP '2026-11-17'")  # fmt: skip
    memo.start()
    again = found(memo)
    memo.finish()
    assert again == found(None) and again != first, "the window cost of the windows over that day changed"
    # read again, the windows holding Nov 17: of search_orders, the "after" of the three days its
    # growth is checked on (further than a window from its schema change); of its service's runs,
    # whose calls may come a day after a window, the "after" of Nov 10-17 and the "before" of Nov 17
    assert memo.read == 3 + 9 < read_first


def test_one_pass_over_the_calls_gives_each_subject_what_reading_its_calls_gives(db_path: str) -> None:
    """The survey an evaluation makes: the tools, the services, every day's fingerprint and each
    tool's dominant schema a day, as the reads of each subject's calls give them (calls without
    a service, errors, calls with no fingerprint, and ties between two fingerprints)."""
    from collector.alerts.detection import _daily, tools_of
    from collector.alerts.memo import DAYS_SQL, survey
    from collector.alerts.runs import services_of
    from collector.query.runs import NO_SERVICE
    from collector.store.connection import read_connection

    Store(db_path).ensure_schema()
    with duckdb.connect(db_path) as con:
        con.execute("""
            INSERT INTO tool_calls (trace_id, span_id, tool_name, service_name, start_time, start_ns, end_ns,
                                    view_tokens, raw_tokens, truncated, later_llm_calls, status, schema_fingerprint)
            SELECT lpad(to_hex(i), 32, '0'), lpad(to_hex(i), 16, '0'), 'tool' || (i % 3),
                   CASE i % 5 WHEN 0 THEN NULL WHEN 1 THEN 'billing' ELSE 'support' END,
                   TIMESTAMP '2026-03-01' + to_minutes(i * 37), 0, 0, i % 97, i % 89 * 3, i % 7 = 0,
                   i % 4, CASE WHEN i % 11 = 0 THEN 'error' ELSE 'ok' END,
                   CASE WHEN i % 13 = 0 THEN NULL WHEN i < 2000 OR i % 2 = 0 THEN 'fp-a' ELSE 'fp-b' END
            FROM range(4000) t(i)""")
        # a day whose two fingerprints tie, and a day of calls that are all errors
        con.execute("""
            INSERT INTO tool_calls (trace_id, span_id, tool_name, start_time, start_ns, end_ns, status,
                                    schema_fingerprint)
            VALUES ('a' || repeat('0', 31), 'a' || repeat('0', 15), 'tool9', '2026-01-05 10:00', 0, 0, 'ok', 'fp-z'),
                   ('b' || repeat('0', 31), 'b' || repeat('0', 15), 'tool9', '2026-01-05 11:00', 0, 0, 'ok', 'fp-y'),
                   ('c' || repeat('0', 31), 'c' || repeat('0', 15), 'tool9', '2026-01-06 11:00', 0, 0, 'error', 'fp-x')""")
    with read_connection(db_path) as con:
        found = survey(con, NO_SERVICE)
        assert found.tools == tools_of(con) == ["tool0", "tool1", "tool2", "tool9"]
        assert found.services == services_of(con) == [NO_SERVICE, "billing", "support"]
        for tool in found.tools:
            rows = con.execute(DAYS_SQL.format(where="tool_name = ?"), [tool]).fetchall()
            assert found.days[("tool", tool)] == ([r[0] for r in rows], [r[1:] for r in rows])
            assert found.daily[tool] == _daily(con, tool)
        for service in found.services:
            rows = con.execute(
                DAYS_SQL.format(where=f"coalesce(service_name, '{NO_SERVICE}') = ?"), [service]
            ).fetchall()
            assert found.days[("runs", service)] == ([r[0] for r in rows], [r[1:] for r in rows])
    assert [d[1] for d in found.daily["tool9"]] == ["fp-y", None]
    assert any(len({fp for fp in (d[1] for d in found.daily[t])}) > 1 for t in found.tools[:3])


def test_evaluations_with_a_memo_find_what_one_without_finds_and_read_only_what_changed(db_path: str) -> None:
    """``serve``'s and ``watch``'s evaluations, one after another (the survey and the memo)."""
    from collector.alerts.memo import Memo

    history(db_path, [("A", OLD, 1000, 0.0)] * 7 + [("B", NEW, 2200, 0.3)] * 7 + [("B", NEW, 2200, 0.3)] * 3)
    runs_history(db_path, [{"search": (1, 2000)}] * 7 + [{"search": (3, 2000)}] * 7)
    memo = Memo()
    first = evaluate_all(db_path, Rules(), memo=memo)
    assert {"schema_change", "run_growth"} <= {a.kind for a in first}
    read_first = memo.read
    assert evaluate_all(db_path, Rules(), memo=memo) == [] and memo.read == 0, "nothing changed: every window kept"
    with duckdb.connect(db_path) as con:
        con.execute("DELETE FROM alerts")
        con.execute("UPDATE tool_calls SET later_llm_calls = 9 WHERE tool_name = 'search_orders' "
                    "AND start_time >= TIMESTAMP '2026-11-17'")  # fmt: skip
    again = evaluate_all(db_path, Rules(), memo=memo)
    assert memo.read == 3 + 9 < read_first, "the windows holding the changed day, as in the test above"
    with duckdb.connect(db_path) as con:
        con.execute("DELETE FROM alerts")
    assert again == evaluate_all(db_path, Rules()), "what an evaluation without a memo finds"


def test_a_watch_whose_evaluation_fails_in_any_way_says_so_and_goes_on(db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    import threading

    from collector.services import run_watch

    history(db_path, [("A", OLD, 1000, 0.0)] * 3)
    with duckdb.connect(db_path) as con:  # a store no toolmeter wrote: the detection's SQL fails on it
        con.execute("ALTER TABLE tool_calls DROP COLUMN schema_fingerprint")
    stop = threading.Event()
    watcher = threading.Thread(target=run_watch, args=(db_path, None, None, 0.05, stop))
    watcher.start()
    deadline = time.monotonic() + 60
    while capsys.readouterr().err.count("toolmeter watch failed (will try again)") < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert watcher.is_alive(), "the watch ended at the first error"
    stop.set()
    watcher.join(timeout=30)
    assert not watcher.is_alive()
