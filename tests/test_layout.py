"""The shape of the code a reader relies on: small modules and functions, one place for configuration."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from collector import config

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("collector/**/*.py"), *ROOT.glob("dashboard/**/*.py")])
MAX_MODULE_LINES = 420
MAX_FUNCTION_LINES = 80


def test_no_module_or_function_outgrows_a_reading() -> None:
    long_modules = {
        str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    long_functions = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"  # type: ignore[operator]
        for p in SOURCES
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES  # type: ignore[operator]
    ]
    assert long_modules == {}
    assert long_functions == []


def test_every_variable_is_named_in_the_config_module_only_and_documented() -> None:
    named = re.compile(r"[\"']TOOLMETER_[A-Z_]+[\"']")
    elsewhere = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in SOURCES if p.name != "config.py"
                 for m in named.finditer(p.read_text())]  # fmt: skip
    assert elsewhere == [], "read TOOLMETER_* variables through collector.config"
    variables = {v for k, v in vars(config).items() if k.endswith("_ENV") and isinstance(v, str)}
    variables |= {config.ENV_PREFIX + f.upper() for f in config.CollectorConfig.__dataclass_fields__}
    readme = (ROOT / "README.md").read_text()
    doc = config.__doc__ or ""
    assert {v for v in variables if f"`{v}`" not in readme} == set()
    assert {v for v in variables if f"``{v}``" not in doc} == set()


def test_nothing_in_the_collector_writes_to_the_environment_of_the_process_it_runs_in() -> None:
    writes = re.compile(r"os\.environ\[[^\]]+\]\s*=|os\.environ\.(setdefault|update)\(|os\.putenv\(")
    found = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in SOURCES
        if p.name != "cli.py"  # the command line's own process, handing settings to its children
        for line in p.read_text().splitlines()
        if writes.search(line)
    ]
    assert found == []


def test_no_page_prints_a_stray_string() -> None:
    # Streamlit's "magic" writes every bare expression of a page script on the page: a string
    # after a constant, meant as its docstring, would show up as text above the title
    stray = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in [*sorted(ROOT.glob("dashboard/app_pages/*.py")), ROOT / "dashboard" / "streamlit_app.py"]
        for node in ast.parse(p.read_text()).body[1:]
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    ]
    assert stray == []


def test_every_package_of_the_source_tree_goes_into_the_wheel() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("collector", "dashboard")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
