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
        "import sys, collector, collector.cli, collector.query.ranking;"
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


def test_the_wheel_ships_the_sample_traces_the_demo_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(root)], check=True, capture_output=True, timeout=300)  # fmt: skip
    (wheel,) = tmp_path.glob("toolmeter-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if n.startswith("sample_traces/") and n.endswith(".json.gz"))
    assert shipped == sorted(f"sample_traces/{p.name}" for p in (root / "sample_traces").glob("*.json.gz"))
    assert "collector/store/schema.sql" in names
