"""The dashboard in a real headless Chromium, served by `toolmeter dashboard` on loopback.

Screenshots of every page, 1440 px wide and full length, are saved in test-artifacts/screenshots/
for a developer to look at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
VIEWPORT = {"width": 1440, "height": 1000}
CHROMIUM = os.environ.get("TOOLMETER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _dashboard(db: str) -> Iterator[str]:
    """`toolmeter dashboard` on a free loopback port, until it answers its health check."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "dashboard", "--db", db, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read() if proc.stdout else ""
                    pytest.fail(f"dashboard did not start: {out}")
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture(scope="module")
def dashboard_url(sample_store: str) -> Iterator[str]:
    with _dashboard(sample_store) as url:
        yield url


@pytest.fixture(scope="module")
def page(dashboard_url: str):  # type: ignore[no-untyped-def]
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium and chromium-driver")
        pytest.skip("chromium is not installed (apt-get install chromium chromium-driver)")
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        pg = browser.new_page(viewport=VIEWPORT)
        yield pg
        browser.close()


def _shot(pg, name: str) -> None:  # type: ignore[no-untyped-def]
    """A full-length screenshot: Streamlit scrolls inside its main element, so a full-page
    capture alone would stop at the window; the window is made as tall as the page first."""
    height = pg.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    pg.set_viewport_size({"width": VIEWPORT["width"], "height": max(VIEWPORT["height"], min(int(height), 12_000))})
    pg.wait_for_timeout(800)  # charts and grids redraw at the new size
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    pg.set_viewport_size(VIEWPORT)


def _settle(pg, title: str, charts: int) -> None:  # type: ignore[no-untyped-def]
    """Wait until the page's title is up, the script has finished and ``charts`` plotly charts are drawn."""
    pg.get_by_role("heading", name=title).wait_for(timeout=60_000)
    pg.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000
    )  # the "Running..." widget is gone
    for i in range(charts):
        chart = pg.locator('[data-testid="stPlotlyChart"]').nth(i)
        chart.scroll_into_view_if_needed(timeout=60_000)
        chart.locator(".main-svg").first.wait_for(timeout=60_000)
    assert pg.locator('[data-testid="stException"]').count() == 0


def test_window_eaters_in_a_browser(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/")
    _settle(page, "Window eaters", charts=1)
    bars = page.locator('[data-testid="stPlotlyChart"] .ytick text').evaluate_all("els => els.map(e => e.textContent)")
    assert bars[-1] == "search_orders"  # plotly lists ticks bottom-up: the top bar is last
    _shot(page, "window_eaters")


def test_the_dashboard_asks_nothing_of_the_internet(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    from urllib.parse import urlparse

    hosts: set[str] = set()
    page.on("request", lambda request: hosts.add(urlparse(request.url).hostname or request.url.split(":")[0]))
    page.goto(f"{dashboard_url}/")
    _settle(page, "Window eaters", charts=1)
    page.wait_for_load_state("networkidle")
    assert hosts - {"127.0.0.1", "data", "blob"} == set()  # favicon included: the hosts have no internet
    assert (
        page.locator('link[rel*="icon"]')
        .first.get_attribute("href", timeout=10_000)
        .startswith(("data:", "/", "./", "http://127.0.0.1"))
    )


def test_clicking_a_bar_opens_that_tool(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/")
    _settle(page, "Window eaters", charts=1)
    bars = page.locator('[data-testid="stPlotlyChart"] .bars .point path')
    bar = bars.nth(bars.count() - 2)  # the second bar from the top (plotly draws bottom-up)
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # plotly's drag layer is on top
    page.get_by_role("heading", name="Tool detail").wait_for(timeout=60_000)
    assert "tool=list_github_issues" in page.url


def test_tool_detail_in_a_browser(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/tool?tool=search_orders")
    _settle(page, "Tool detail", charts=2)
    page.get_by_text("Schema changed on 2026-11-16").wait_for(timeout=60_000)  # under load, text may trail the charts
    for n in (0, 1):
        chart = page.locator('[data-testid="stPlotlyChart"]').nth(n)
        chart.locator(".legendtext", has_text="budget").first.wait_for(timeout=60_000)
    body = page.inner_text("body")
    assert "Schema changed on 2026-11-16" in body and "raw_payload" in body
    assert "schema changed" in page.locator('[data-testid="stPlotlyChart"]').nth(1).inner_text()
    for n, expected in ((0, ("p50", "p95", "p99", "budget")), (1, ("view p99", "view p50", "raw p99", "budget"))):
        legend = page.locator('[data-testid="stPlotlyChart"]').nth(n).locator(".legendtext").all_text_contents()
        assert all(any(text.startswith(e) for text in legend) for e in expected), legend  # each line is named
    _shot(page, "tool_detail")


def test_replay_in_a_browser(page, dashboard_url: str, sample_store: str) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    con = duckdb.connect(sample_store, read_only=True)
    trace_id, span_id = con.execute(
        "SELECT trace_id, span_id FROM tool_calls WHERE tool_name = 'get_customer_orders' AND len(retained_ranges) = 2 LIMIT 1"
    ).fetchone()  # type: ignore[misc]
    con.close()
    page.goto(f"{dashboard_url}/replay?trace={trace_id}&span={span_id}")
    _settle(page, "Trace replay", charts=1)
    assert "Truncated" in page.inner_text('[data-testid="stAlert"]')
    page.locator(".tm-excerpt mark").first.wait_for(timeout=60_000)  # st.html may draw after the charts
    marks = page.locator(".tm-excerpt mark")
    assert marks.count() >= 2
    assert any("refund_pending" in t for t in marks.all_inner_texts())
    _shot(page, "replay")


def test_replay_folds_a_long_retained_range_as_retained(page, dashboard_url: str, sample_store: str) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    con = duckdb.connect(sample_store, read_only=True)
    trace_id, span_id, start, end = con.execute(
        """SELECT trace_id, span_id, r[1], r[2] FROM tool_calls, unnest(retained_ranges) AS u(r)
           WHERE truncated AND r[2] - r[1] > 10000 ORDER BY r[2] - r[1] DESC LIMIT 1"""
    ).fetchone()  # type: ignore[misc]
    con.close()
    page.goto(f"{dashboard_url}/replay?trace={trace_id}&span={span_id}")
    _settle(page, "Trace replay", charts=1)
    page.locator(".tm-excerpt .tm-fold").first.wait_for(timeout=60_000)
    folds = page.locator(".tm-excerpt .tm-fold").all_inner_texts()
    assert any(f"{end - start - 3000:,} retained bytes not shown here" in f for f in folds), folds
    gaps = page.locator(".tm-excerpt .tm-gap").all_inner_texts()
    assert not any(f"{end - start - 3000:,} bytes not retained" in g for g in gaps)
    fold = page.locator(".tm-excerpt details.tm-fold").first
    fold.locator("summary").click()  # too long to draw in place: the fold says where to read it
    assert "show the whole stored raw payload" in fold.inner_text()
    _shot(page, "replay_long_range")


def test_a_folded_retained_stretch_expands_in_place(page, dashboard_url: str, sample_store: str) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    from dashboard.excerpt import FOLD_EXPAND_BYTES, RANGE_END_BYTES

    con = duckdb.connect(sample_store, read_only=True)
    trace_id, span_id, start, end = con.execute(
        """SELECT trace_id, span_id, r[1], r[2] FROM tool_calls, unnest(retained_ranges) AS u(r)
           WHERE truncated AND r[2] - r[1] BETWEEN ? AND ? ORDER BY r[2] - r[1] DESC LIMIT 1""",
        [2 * RANGE_END_BYTES + 1, 2 * RANGE_END_BYTES + FOLD_EXPAND_BYTES],
    ).fetchone()  # type: ignore[misc]
    con.close()
    page.goto(f"{dashboard_url}/replay?trace={trace_id}&span={span_id}")
    _settle(page, "Trace replay", charts=1)
    fold = page.locator(".tm-excerpt details.tm-fold").first
    fold.wait_for(timeout=60_000)
    fold.locator("summary").click()  # the expand control shows the folded bytes, still marked as retained
    inner = fold.locator("mark")
    inner.wait_for(timeout=10_000)
    shown = (inner.get_attribute("data-start"), inner.get_attribute("data-end"))
    assert shown == (str(start + RANGE_END_BYTES), str(end - RANGE_END_BYTES))


def test_replay_shows_the_end_of_a_long_view(page, dashboard_url: str, sample_store: str) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    from collector.store.payloads import load_payload
    from dashboard.excerpt import stored_text

    con = duckdb.connect(sample_store, read_only=True)
    trace_id, span_id = con.execute(
        """SELECT trace_id, span_id FROM payloads WHERE kind = 'view' AND NOT cut ORDER BY total_bytes DESC LIMIT 1"""
    ).fetchone()  # type: ignore[misc]
    view = load_payload(con, sample_store, trace_id, span_id, "view")
    con.close()
    assert view is not None and view.total_bytes > 100_000
    last_line = stored_text(view).rstrip().splitlines()[-1][-60:]
    page.goto(f"{dashboard_url}/replay?trace={trace_id}&span={span_id}")
    _settle(page, "Trace replay", charts=1)
    boxes = page.locator('[data-testid="stCode"]')
    page.get_by_text("more characters").first.wait_for(timeout=60_000)
    text = boxes.last.inner_text()
    assert "more characters" in text and last_line in text  # the end, where truncation notes live, is shown
    box = boxes.last.bounding_box()
    assert box is not None and box["height"] <= 650  # a scroll box beside the raw, not a page-long column
    _shot(page, "replay_long_view")


def test_alerts_in_a_browser(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/alerts")
    _settle(page, "Alerts", charts=1)
    body = page.inner_text("body")
    assert "search_orders · schema change · 2026-11-16" in body and "raw_payload" in body
    _shot(page, "alerts")


def test_coverage_in_a_browser(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/coverage")
    _settle(page, "Coverage", charts=0)
    page.get_by_text("support-agent · gen_ai").first.wait_for(timeout=60_000)  # the hint cards are drawn last
    body = page.inner_text("body")
    assert "support-agent" in body and "Hints" in body
    grid = page.locator('[data-testid="stDataFrame"] canvas').first
    grid.wait_for(timeout=60_000)
    page.wait_for_timeout(1000)  # the grid paints its cells on a canvas after it is attached
    _shot(page, "coverage")


def test_whatif_in_a_browser(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/whatif")
    _settle(page, "What-if budgets", charts=1)
    body = page.inner_text("body")
    assert "Suggested budgets" in body and "search_orders" in body
    assert "window cost, as recorded" in body and "with these budgets" in body
    _shot(page, "whatif")


def test_a_shared_link_opens_the_same_tool_trace_and_filters(page, dashboard_url: str, sample_store: str) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    con = duckdb.connect(sample_store, read_only=True)
    trace_id, span_id = con.execute(
        "SELECT trace_id, span_id FROM tool_calls WHERE tool_name = 'fetch_pod_logs' AND service_name = 'sre-agent' "
        "AND start_time >= '2026-11-12' AND start_time < '2026-11-15' ORDER BY trace_id LIMIT 1"
    ).fetchone()  # type: ignore[misc]
    con.close()
    # a link as a colleague would paste it: the tool page, one service, three days
    page.goto(f"{dashboard_url}/tool?tool=fetch_pod_logs&service=sre-agent&from=2026-11-12&to=2026-11-14")
    _settle(page, "Tool detail", charts=2)
    main = page.locator('[data-testid="stMain"]')
    assert main.locator('input[aria-label="tool"]').input_value() == "fetch_pod_logs"
    sidebar = "".join(page.locator('[data-testid="stSidebar"]').inner_text().split())  # the date is drawn in parts
    assert "sre-agent" in sidebar and "2026/11/12–2026/11/14" in sidebar
    # the URL keeps the view: reloading it lands on the same place
    page.reload()
    _settle(page, "Tool detail", charts=2)
    assert "tool=fetch_pod_logs" in page.url and "service=sre-agent" in page.url and "from=2026-11-12" in page.url
    # a trace's link opens that trace and that call, and the URL names them
    page.goto(f"{dashboard_url}/replay?trace={trace_id}&span={span_id}")
    _settle(page, "Trace replay", charts=1)
    assert page.locator('[data-testid="stMain"] input[aria-label="trace"]').input_value().startswith(trace_id[:12])
    assert f"trace={trace_id}" in page.url and f"span={span_id}" in page.url
    assert page.get_by_role("button", name="Download the steps (CSV)").count() == 1
    page.goto(f"{dashboard_url}/eaters")
    _settle(page, "Window eaters", charts=1)
    assert page.get_by_role("button", name="Download the ranking (CSV)").count() == 1


def test_tokens_as_billed_in_a_browser(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/cost")
    _settle(page, "Tokens as billed", charts=1)
    body = page.inner_text("body")
    assert "Calibration" in body and "Window cost per tool" in body and "Tool-result tokens per run" in body
    assert "in the models' tokens" in body and "Prices taken" in body
    _shot(page, "cost")


def _grid_column(pg, name: str, n: int = 0) -> list[str]:  # type: ignore[no-untyped-def]
    """The cells of one column of the n-th dataframe, read from the grid's accessible table
    (its cells are painted on a canvas); a sorted header carries an arrow, which is dropped."""
    return pg.evaluate(  # type: ignore[no-any-return]
        """([name, n]) => {
            const t = document.querySelectorAll('[data-testid="stDataFrame"] table')[n];
            const heads = [...t.querySelectorAll('th')].map(e => e.textContent.replace(/^[↑↓]\\s*/, ''));
            const i = heads.indexOf(name);
            if (i < 0) return null;
            return [...t.querySelectorAll('tbody tr')].map(r => r.querySelectorAll('td')[i].textContent);
        }""",
        [name, n],
    )


def _pick(pg, label: str, option: str) -> None:  # type: ignore[no-untyped-def]
    """Choose ``option`` in the sidebar multiselect labelled ``label``."""
    pg.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]', has_text=label).click()
    pg.get_by_role("option", name=option, exact=True).click()
    pg.keyboard.press("Escape")
    pg.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)


def test_the_home_table_fits_the_page_and_sorts_a_number_column_as_numbers(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/")
    _settle(page, "Window eaters", charts=1)
    grid = page.locator('[data-testid="stDataFrame"]').first
    grid.scroll_into_view_if_needed()
    grid.locator("table").wait_for(state="attached", timeout=60_000)
    heads = grid.locator("th").all_text_contents()
    # the grid only builds the headers of the columns it draws: every column is on the page
    assert heads[-1] == "window cost" and len(heads) == 11, heads
    assert len(_grid_column(page, "tool")) == 11  # every row, no inner scroll
    box = grid.bounding_box()
    assert box is not None
    # the header of "view p99": after the row markers (35 px), tool (156 px), calls and view p50 (74 px each)
    page.mouse.click(box["x"] + 35 + 156 + 2 * 74 + 37, box["y"] + 17)
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stDataFrame\"] th')].some(e => /^[↑↓]/.test(e.textContent))"
    )
    values = [float(v) for v in _grid_column(page, "view p99")]
    assert values == sorted(values) and values[0] < 100 < values[-1]  # 88 before 880 before 9,235: numbers, not text
    assert _grid_column(page, "tool")[0] == "get_weather"


def test_tool_detail_opens_a_trace_in_the_same_tab_and_keeps_the_filters(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/tool?tool=search_orders")
    _settle(page, "Tool detail", charts=2)
    _pick(page, "service / agent", "support-agent")
    page.get_by_text("Select a row to replay its trace").wait_for(timeout=60_000)
    grid = page.locator('[data-testid="stDataFrame"]').last
    grid.scroll_into_view_if_needed()
    grid.locator("table").wait_for(state="attached", timeout=60_000)
    _shot(page, "tool_detail_filtered")
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    assert box is not None
    pages_before = len(page.context.pages)
    page.mouse.click(box["x"] + 17, box["y"] + 35 + 17)  # the first row's selection box
    page.get_by_role("heading", name="Trace replay").wait_for(timeout=60_000)
    assert "trace=" in page.url and "span=" in page.url
    assert len(page.context.pages) == pages_before  # the same tab, not a new one
    chosen = page.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]', has_text="service / agent")
    assert "support-agent" in chosen.inner_text()  # the filter survived the move
    _settle(page, "Trace replay", charts=1)
    assert "search_orders" in page.locator('[data-testid="stHeading"]').all_inner_texts()[-1]


def test_an_empty_selection_says_so_in_the_browser(page, dashboard_url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{dashboard_url}/tool?tool=search_orders")
    _settle(page, "Tool detail", charts=2)
    _pick(page, "service / agent", "research-agent")  # a service that never calls search_orders
    page.get_by_text("No call of").wait_for(timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "Widen them, or pick another tool" in page.inner_text("body")


def test_a_foreign_duckdb_file_says_so_in_the_browser(page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    foreign = str(tmp_path / "someone-else.duckdb")
    with duckdb.connect(foreign) as con:
        con.execute("CREATE TABLE orders (id INTEGER)")
    with _dashboard(foreign) as url:
        page.goto(f"{url}/")
        page.get_by_text("not a toolmeter store").first.wait_for(timeout=60_000)
        # the hint is drawn after the error: wait for it too, not only for the first
        page.get_by_text("to load the sample traces").first.wait_for(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert "toolmeter demo" in page.inner_text("body")
        _shot(page, "foreign_store")


def test_replay_marks_every_retained_range_byte_for_byte(page, dashboard_url: str, sample_store: str) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    from collector.store.payloads import load_payload

    con = duckdb.connect(sample_store, read_only=True)
    trace_id, span_id, ranges = con.execute(
        """SELECT trace_id, span_id, retained_ranges FROM tool_calls WHERE retained_source = 'inferred'
           ORDER BY len(retained_ranges) DESC LIMIT 1"""
    ).fetchone()  # type: ignore[misc]
    raw = load_payload(con, sample_store, trace_id, span_id, "raw")
    con.close()
    assert raw is not None and not raw.cut and len(ranges) >= 8
    page.goto(f"{dashboard_url}/replay?trace={trace_id}&span={span_id}")
    _settle(page, "Trace replay", charts=1)
    page.locator(".tm-excerpt mark").first.wait_for(timeout=60_000)
    marks = page.locator(".tm-excerpt mark").evaluate_all(
        "els => els.map(e => [+e.dataset.start, +e.dataset.end, e.textContent])"
    )
    marked: set[int] = set()
    for start, end, text in marks:
        assert text == raw.head[start:end].decode("utf-8", errors="replace"), (start, end)  # the bytes themselves
        marked |= set(range(start, end))
    retained = {b for s, e in ranges for b in range(s, e)}
    assert marked == retained  # every retained byte highlighted, and nothing else
    _shot(page, "replay_many_ranges")
