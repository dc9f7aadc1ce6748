import collector


def test_public_api_is_pinned() -> None:
    assert sorted(collector.__all__) == [
        "CollectorConfig",
        "ConfigError",
        "InputError",
        "StoreError",
        "ToolResult",
        "ToolResultProcessor",
        "ToolmeterError",
        "__version__",
        "measured_tool",
        "record_tool_result",
    ]


def test_collector_never_imports_the_dashboard_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys, collector, collector.cli, collector.report;"
        "bad = [m for m in ('streamlit', 'plotly', 'dashboard') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_dashboard_queries_and_charts_are_plain_functions() -> None:
    import subprocess
    import sys

    code = "import sys, dashboard.queries, dashboard.charts, dashboard.excerpt; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
