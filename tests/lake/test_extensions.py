"""DuckDB extensions come from the installed wheels, into toolmeter's state, never from the network."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import duckdb
import pytest

from collector.errors import StoreError
from collector.store.extensions import (
    INSTALL_HINT,
    LAKE_EXTENSIONS,
    ExtensionError,
    extension_directory,
    find_extension,
    load_extensions,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home directory, so anything DuckDB puts under ~/.duckdb shows."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


def _installed(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[bool, str, str]]:
    rows = con.execute(
        "SELECT extension_name, loaded, install_path, installed_from FROM duckdb_extensions() "
        "WHERE installed AND install_path <> '(BUILT-IN)'"
    ).fetchall()
    return {name: (loaded, path, source) for name, loaded, path, source in rows}


def test_loads_from_the_wheels_into_the_state_dir(home: Path, tmp_path: Path) -> None:
    state = tmp_path / "store" / ".toolmeter"
    con = duckdb.connect()
    load_extensions(con, [*LAKE_EXTENSIONS, "httpfs"], state_dir=state)

    target = extension_directory(state)
    installed = _installed(con)
    assert set(installed) == {"ducklake", "postgres_scanner", "httpfs"}
    for catalog_name, name in [("ducklake", "ducklake"), ("postgres_scanner", "postgres"), ("httpfs", "httpfs")]:
        loaded, path, source = installed[catalog_name]
        assert loaded
        assert Path(path).is_relative_to(target)
        assert source == str(find_extension(name).path)
    assert list(home.iterdir()) == []
    settings = dict(
        con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('autoinstall_known_extensions', 'autoload_known_extensions', 'allow_community_extensions', "
            "'extension_directory')"
        ).fetchall()
    )
    assert settings == {
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
        "allow_community_extensions": "false",
        "extension_directory": str(target),
    }
    functions = con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'ducklake_snapshots'")
    assert functions.fetchone() != (0,)


def test_a_missing_extension_is_not_downloaded(home: Path, tmp_path: Path) -> None:
    con = duckdb.connect()
    load_extensions(con, ["postgres"], state_dir=tmp_path / "state")
    with pytest.raises(duckdb.Error) as caught:
        con.execute(f"ATTACH '{tmp_path / 'x.db'}' AS s (TYPE sqlite)")
    message = str(caught.value)
    assert "not found" in message
    assert str(extension_directory(tmp_path / "state")) in message
    assert "download" not in message.lower()
    assert list(home.iterdir()) == []


def test_loading_again_is_idempotent_and_does_not_reinstall(home: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    con = duckdb.connect()
    load_extensions(con, LAKE_EXTENSIONS, state_dir=state)
    files = sorted(extension_directory(state).rglob("*.duckdb_extension"))
    stamps = [f.stat().st_mtime_ns for f in files]
    load_extensions(con, LAKE_EXTENSIONS, state_dir=state)

    fresh = duckdb.connect()
    load_extensions(fresh, LAKE_EXTENSIONS, state_dir=state)
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert all(loaded for loaded, _, _ in _installed(fresh).values())


def test_postgres_is_listed_under_its_catalog_name() -> None:
    found = find_extension("postgres")
    assert found.catalog_name == "postgres_scanner"
    assert found.path.name == "postgres.duckdb_extension"
    assert found.path.parent.name == "v" + duckdb.__version__
    assert found.duckdb_version == duckdb.__version__


def test_a_missing_wheel_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec | None:
        return None if name == "duckdb_extension_ducklake" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    con = duckdb.connect()
    before = con.execute("SELECT current_setting('extension_directory')").fetchone()
    with pytest.raises(ExtensionError) as caught:
        load_extensions(con, LAKE_EXTENSIONS, state_dir=tmp_path / "state")
    assert str(caught.value) == (
        "the DuckDB extension 'ducklake' is not installed (Python package duckdb-extension-ducklake); "
        "install it with: pip install 'toolmeter[lake]'"
    )
    assert INSTALL_HINT in str(caught.value)
    assert isinstance(caught.value, StoreError)
    # nothing was changed on the connection
    assert con.execute("SELECT current_setting('extension_directory')").fetchone() == before
    assert not (tmp_path / "state").exists()


def test_a_wheel_for_another_duckdb_names_the_pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site" / "duckdb_extension_ducklake"
    (package / "extensions" / "v1.4.0").mkdir(parents=True)
    (package / "__init__.py").write_text("raise AssertionError('the wheel must not be imported')\n")
    (package / "extensions" / "v1.4.0" / "ducklake.duckdb_extension").write_bytes(b"not an extension")
    monkeypatch.delitem(sys.modules, "duckdb_extension_ducklake", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    with pytest.raises(ExtensionError) as caught:
        load_extensions(duckdb.connect(), ["ducklake"], state_dir=tmp_path / "state")
    assert str(caught.value) == (
        f"duckdb {duckdb.__version__} is installed but duckdb-extension-ducklake ships v1.4.0; pin duckdb==1.4.0"
    )


def test_another_duckdb_than_the_wheels_were_built_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = find_extension("ducklake").duckdb_version
    monkeypatch.setattr(duckdb, "__version__", "9.9.9")
    with pytest.raises(ExtensionError) as caught:
        find_extension("ducklake")
    assert str(caught.value) == (
        f"duckdb 9.9.9 is installed but duckdb-extension-ducklake ships v{shipped}; pin duckdb=={shipped}"
    )


def test_an_empty_wheel_and_an_unknown_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "site" / "duckdb_extension_httpfs").mkdir(parents=True)
    (tmp_path / "site" / "duckdb_extension_httpfs" / "__init__.py").write_text("")
    monkeypatch.delitem(sys.modules, "duckdb_extension_httpfs", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ExtensionError, match=r"holds no \.duckdb_extension file; reinstall it with: pip install"):
        find_extension("httpfs")
    with pytest.raises(ExtensionError, match="no wheel is known for DuckDB extension 'spatial'"):
        find_extension("spatial")
