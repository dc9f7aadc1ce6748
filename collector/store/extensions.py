"""Load DuckDB extensions from installed Python wheels, never from the network.

DuckDB fetches an extension it lacks from ``extensions.duckdb.org`` and keeps it under
``~/.duckdb/extensions``. Neither works on the hosts toolmeter is meant for: collectors run
on machines with no internet access, under service accounts whose home directory may be
read-only, shared, or absent. And the DuckLake store needs three extensions (``ducklake``,
``postgres`` for a PostgreSQL catalog, ``httpfs`` for object storage).

So the ``lake`` extra depends on PyPI wheels that carry the extension binaries for
exactly one DuckDB release (``duckdb-extension-ducklake==1.5.5`` ships
``extensions/v1.5.5/ducklake.duckdb_extension``). :func:`load_extensions` finds that file
with :func:`importlib.util.find_spec` (the wheel's package is never imported), installs it
into a directory inside toolmeter's own state, not the user's home, and loads it. Before
that it turns off everything that could reach the network on its own: auto-install of
known extensions, and community extensions. Auto-loading stays off too, so a query that
needs an extension nobody loaded fails with a clear error instead of trying a download.

One case bypasses the auto-load setting: ``ATTACH ... (TYPE postgres)``, and the
``ducklake:postgres:`` catalog behind it, loads ``postgres_scanner`` from the extension
directory by itself (and, with auto-install on, would download it). Installing and
loading the wheel's ``postgres`` first makes that path use our file.

The calls are idempotent: an extension already loaded costs one catalog query; one
already installed from the same file is only loaded (about 0.3 s: DuckDB checks the
signature); a first install copies the file (about 1 s for DuckLake's 36 MB).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import duckdb

from collector.errors import StoreError

INSTALL_HINT: Final = "pip install 'toolmeter[lake]'"
"""What to run when an extension wheel is missing."""

LAKE_EXTENSIONS: Final = ("postgres", "ducklake")
"""What a DuckLake store with a PostgreSQL catalog loads, in this order."""

OBJECT_STORAGE_EXTENSIONS: Final = ("httpfs",)
"""What a DuckLake data path on S3, GCS or HTTP needs in addition."""

EXTENSIONS_SUBDIR: Final = "duckdb_extensions"
"""Where, under the state directory, the extension files are installed."""

_WHEELS: Final[Mapping[str, str]] = {
    "ducklake": "duckdb_extension_ducklake",
    "postgres": "duckdb_extension_postgres",
    "httpfs": "duckdb_extension_httpfs",
}
"""Extension name (as toolmeter spells it) to the importable package of its wheel."""

_CATALOG_NAMES: Final[Mapping[str, str]] = {"postgres": "postgres_scanner"}
"""Names DuckDB lists an extension under when it differs from the wheel's file name."""

_NETWORK_OFF: Final = (
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
)


class ExtensionError(StoreError):
    """A DuckDB extension cannot be found in the installed wheels, or does not load."""


@dataclass(frozen=True)
class ExtensionFile:
    """One extension binary shipped in a wheel."""

    name: str
    """The extension's name as toolmeter spells it (``postgres``, ``ducklake``)."""
    catalog_name: str
    """The name ``duckdb_extensions()`` lists it under (``postgres_scanner`` for ``postgres``)."""
    path: Path
    """The ``.duckdb_extension`` file inside the wheel's package directory."""
    duckdb_version: str
    """The DuckDB release it was built for, without the ``v`` (``1.5.5``)."""


def extension_directory(state_dir: Path) -> Path:
    """The directory under ``state_dir`` that DuckDB installs extensions into (absolute)."""
    return Path(state_dir).absolute() / EXTENSIONS_SUBDIR


def _distribution(name: str) -> str:
    return "duckdb-extension-" + name


def find_extension(name: str) -> ExtensionFile:
    """Locate extension ``name`` in its installed wheel, checking it matches this DuckDB.

    Raises :class:`ExtensionError` when the wheel is not installed, holds no extension file,
    or was built for another DuckDB release than the one installed.
    """
    package = _WHEELS.get(name)
    if package is None:
        known = ", ".join(sorted(_WHEELS))
        raise ExtensionError(f"no wheel is known for DuckDB extension {name!r} (known: {known})")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ExtensionError(
            f"the DuckDB extension {name!r} is not installed (Python package {_distribution(name)}); "
            f"install it with: {INSTALL_HINT}"
        )
    found = sorted(f for location in locations for f in Path(location).glob("extensions/v*/*.duckdb_extension"))
    if not found:
        raise ExtensionError(
            f"{_distribution(name)} is installed at {locations[0]} but holds no .duckdb_extension file; "
            f"reinstall it with: {INSTALL_HINT}"
        )
    wanted = "v" + duckdb.__version__
    for path in found:
        if path.parent.name == wanted:
            return ExtensionFile(name, _CATALOG_NAMES.get(name, name), path, duckdb.__version__)
    shipped = ", ".join(sorted({path.parent.name for path in found}))
    pinned = shipped.split(", ")[0].removeprefix("v")
    raise ExtensionError(
        f"duckdb {duckdb.__version__} is installed but {_distribution(name)} ships {shipped}; pin duckdb=={pinned}"
    )


def sql_literal(text: str) -> str:
    """``text`` as a SQL string literal, for the statements that take no parameters (ATTACH,
    SET, INSTALL)."""
    return "'" + text.replace("'", "''") + "'"


def _state(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[bool, str]]:
    """Per extension name and alias: (loaded, installed_from) for non-built-in extensions."""
    rows = con.execute(
        "SELECT extension_name, aliases, loaded, installed, coalesce(installed_from, '') FROM duckdb_extensions()"
    ).fetchall()
    state: dict[str, tuple[bool, str]] = {}
    for name, aliases, loaded, installed, source in rows:
        entry = (bool(loaded), str(source) if installed else "")
        for key in [name, *(aliases or [])]:
            state[str(key)] = entry
    return state


def load_extensions(
    con: duckdb.DuckDBPyConnection,
    names: Iterable[str],
    *,
    state_dir: Path,
) -> None:
    """Install and load the extensions ``names`` into ``con`` from their wheels, offline.

    ``state_dir`` is toolmeter's own state directory (e.g. ``<store dir>/.toolmeter``);
    extensions are installed under ``state_dir / "duckdb_extensions"``, which becomes the
    connection's ``extension_directory`` (a setting of the whole database instance).
    Auto-install, auto-load and community extensions are turned off first.

    Every extension is located and version-checked before anything is installed, so a
    missing wheel fails before the connection is changed. Raises :class:`ExtensionError`.
    """
    files = [find_extension(name) for name in dict.fromkeys(names)]
    directory = extension_directory(state_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExtensionError(f"cannot create the DuckDB extension directory {directory}: {exc}") from exc
    try:
        for statement in _NETWORK_OFF:
            con.execute(statement)
        con.execute(f"SET extension_directory = {sql_literal(str(directory))}")
        state = _state(con)
    except duckdb.Error as exc:
        raise ExtensionError(f"cannot configure DuckDB for offline extensions: {exc}") from exc
    for ext in files:
        loaded, installed_from = state.get(ext.catalog_name, (False, ""))
        if loaded:
            continue
        try:
            if installed_from != str(ext.path):
                # FORCE: a file installed from elsewhere (another venv) may be another build.
                con.execute(f"FORCE INSTALL {sql_literal(str(ext.path))}")
            con.execute(f"LOAD {ext.catalog_name}")
        except duckdb.Error as exc:
            raise ExtensionError(
                f"cannot load the DuckDB extension {ext.name!r} from {ext.path} into {directory}: {exc}"
            ) from exc
