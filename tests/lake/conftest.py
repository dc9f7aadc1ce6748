"""A real PostgreSQL server for the DuckLake tests, started once per test run.

``postgres`` (session): a server of its own on 127.0.0.1 and a free port, its data and
socket in a fresh temporary directory, with a login role and a database for toolmeter.
It can be stopped, started and restarted on the same port for fault tests.

``lake`` (per test): a fresh catalog database on that server and a fresh data directory,
with helpers to attach it as a DuckLake from DuckDB.

When running as root, the server runs as the ``postgres`` OS user (PostgreSQL refuses
root). Without PostgreSQL's server binaries the tests skip, saying how to install them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from collector.store.extensions import LAKE_EXTENSIONS, load_extensions

INSTALL_POSTGRES = "apt-get install -y postgresql"
SERVER_OS_USER = "postgres"
SUPERUSER = "postgres"
ROLE = "toolmeter"
DATABASE = "toolmeter"
_REQUIRED = ("initdb", "pg_ctl", "postgres", "psql")
_START_ATTEMPTS = 3
_LOG_TAIL_LINES = 60
_LOG_LINE_CHARS = 300


def find_postgres_bindir() -> Path | None:
    """The directory holding initdb, pg_ctl, postgres and psql: PATH first, then the newest Debian install."""
    on_path = shutil.which("pg_ctl")
    candidates: list[Path] = []
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
        candidates.append(Path(on_path).parent)

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for directory in candidates:
        if all(os.access(directory / tool, os.X_OK) for tool in _REQUIRED):
            return directory
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _dsn_value(text: str) -> str:
    if text and re.fullmatch(r"[A-Za-z0-9_.\-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class PostgresError(RuntimeError):
    """The test server did not do what it was asked; the message ends with its log."""


@dataclass
class PostgresServer:
    """A PostgreSQL server owned by the test run."""

    bindir: Path
    root: Path
    port: int
    password: str
    host: str = "127.0.0.1"
    user: str = ROLE
    dbname: str = DATABASE

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root

    @property
    def logfile(self) -> Path:
        return self.root / "postgresql.log"

    @property
    def dsn(self) -> str:
        """A libpq connection string for the toolmeter role and database."""
        return self.dsn_for(self.dbname)

    def dsn_for(self, dbname: str) -> str:
        """A libpq connection string for the toolmeter role and database ``dbname``."""
        parts = {"dbname": dbname, "host": self.host, "port": str(self.port), "user": self.user}
        parts["password"] = self.password
        return " ".join(f"{key}={_dsn_value(value)}" for key, value in parts.items())

    # --- process control ---------------------------------------------------------

    def _as_server_user(self, argv: Sequence[str]) -> list[str]:
        if os.geteuid() != 0:
            return list(argv)
        if shutil.which("runuser"):
            return ["runuser", "-u", SERVER_OS_USER, "--", *argv]
        return ["su", SERVER_OS_USER, "-s", "/bin/sh", "-c", " ".join(_shell_quote(arg) for arg in argv)]

    def _run(self, argv: Sequence[str], what: str, *, as_server: bool = True) -> str:
        command = self._as_server_user(argv) if as_server else list(argv)
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
        if done.returncode != 0:
            raise PostgresError(
                f"{what} failed (exit {done.returncode}): {' '.join(command)}\n"
                f"{done.stdout}{done.stderr}\n--- {self.logfile} ---\n{self.log_tail()}"
            )
        return done.stdout

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.logfile.read_text(errors="replace")
        except OSError:
            return "(no log)"
        tail = text.splitlines()[-lines:]
        # a failed DuckLake commit logs its whole SQL: keep each line readable
        return "\n".join(line if len(line) <= _LOG_LINE_CHARS else line[:_LOG_LINE_CHARS] + " ..." for line in tail)

    def initdb(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        pwfile = self.root / "superuser.pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            self.root.chmod(0o755)
            entry = pwd.getpwnam(SERVER_OS_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            "initdb",
        )
        pwfile.unlink()
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "on",
            "synchronous_commit": "on",
            "max_connections": "100",
            "shared_buffers": "32MB",
            "logging_collector": "off",
            "log_line_prefix": "%m [%p] %q%u@%d ",
        }
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write("\n# toolmeter tests\n")
            for key, value in settings.items():
                conf.write(f"{key} = {_quote_literal(value)}\n")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-l",
                str(self.logfile),
                "-w",
                "-t",
                "60",
                "start",
            ],
            "pg_ctl start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode`` is pg_ctl's: smart, fast or immediate) and wait for it."""
        self._run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop"],
            "pg_ctl stop",
        )

    def restart(self, mode: str = "fast") -> None:
        """Stop (``-m fast``: open sessions are cut) and start again on the same port."""
        self.stop(mode)
        self.start()

    def is_running(self) -> bool:
        command = self._as_server_user([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "status"])
        return subprocess.run(command, capture_output=True, check=False).returncode == 0

    # --- SQL as superuser over the socket -------------------------------------------

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run ``sql`` as the superuser over the Unix socket (one statement per call, no transaction)."""
        return self._run(
            [
                str(self.bindir / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                str(self.socket_dir),
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                dbname,
                "-c",
                sql,
            ],
            "psql",
            as_server=False,
        )

    def create_database(self, dbname: str) -> None:
        self.psql(f'CREATE DATABASE "{dbname}" OWNER "{self.user}"')

    def drop_database(self, dbname: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')

    def bootstrap(self) -> None:
        self.psql(f'CREATE ROLE "{self.user}" WITH LOGIN PASSWORD {_quote_literal(self.password)}')
        self.create_database(self.dbname)


def _shell_quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


_SERVER: PostgresServer | None = None


def _start_server(bindir: Path) -> tuple[PostgresServer, Path]:
    parent = Path(tempfile.mkdtemp(prefix="toolmeter-pg-"))
    error: PostgresError | None = None
    for attempt in range(_START_ATTEMPTS):
        server = PostgresServer(
            bindir=bindir, root=parent / f"pg{attempt}", port=free_port(), password=secrets.token_hex(12)
        )
        if os.geteuid() == 0:
            parent.chmod(0o755)
        try:
            server.initdb()
            server.start()
            server.bootstrap()
        except PostgresError as exc:  # most likely another process took the port
            error = exc
            with contextlib.suppress(PostgresError):
                server.stop("immediate")
            continue
        return server, parent
    shutil.rmtree(parent, ignore_errors=True)
    assert error is not None
    raise error


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A running PostgreSQL on 127.0.0.1 with role ``toolmeter`` (password) and database ``toolmeter``."""
    global _SERVER
    bindir = find_postgres_bindir()
    if bindir is None:
        pytest.skip(
            f"PostgreSQL server binaries (initdb, pg_ctl, postgres, psql) not found; install them: {INSTALL_POSTGRES}"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_OS_USER)
        except KeyError:
            pytest.skip(
                f"running as root and there is no {SERVER_OS_USER!r} OS user to run PostgreSQL as: {INSTALL_POSTGRES}"
            )
    server, parent = _start_server(bindir)
    _SERVER = server
    try:
        yield server
    finally:
        _SERVER = None
        if server.is_running():
            with contextlib.suppress(PostgresError):
                server.stop("fast")
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def extension_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory shared by the run's tests, so the extensions are installed once."""
    return tmp_path_factory.mktemp("toolmeter-state")


@dataclass(frozen=True)
class Lake:
    """A fresh DuckLake: a catalog database of its own on the test server, and a data directory."""

    server: PostgresServer
    dbname: str
    data_path: Path
    state_dir: Path

    @property
    def catalog_dsn(self) -> str:
        return self.server.dsn_for(self.dbname)

    @property
    def uri(self) -> str:
        return f"ducklake:postgres:{self.catalog_dsn}"

    def attach_sql(self, alias: str = "lake", **options: Any) -> str:
        """``ATTACH 'ducklake:postgres:...' AS alias (DATA_PATH '.../', ...)``; ``options`` add to the list."""
        items = {"DATA_PATH": f"{self.data_path}/", **{key.upper(): value for key, value in options.items()}}
        rendered = []
        for key, value in items.items():
            if isinstance(value, bool):
                rendered.append(key if value else f"{key} false")
            elif isinstance(value, int | float):
                rendered.append(f"{key} {value}")
            else:
                rendered.append(f"{key} {_quote_literal(str(value))}")
        return f"ATTACH {_quote_literal(self.uri)} AS {alias} ({', '.join(rendered)})"

    def connect(self, alias: str = "lake", database: str = ":memory:", **options: Any) -> duckdb.DuckDBPyConnection:
        """A new DuckDB connection with the extensions loaded and this lake attached as ``alias``."""
        con = duckdb.connect(database)
        try:
            load_extensions(con, LAKE_EXTENSIONS, state_dir=self.state_dir)
            con.execute(self.attach_sql(alias, **options))
        except BaseException:
            con.close()
            raise
        return con


_LAKE_NUMBERS = itertools.count(1)


@pytest.fixture
def lake(postgres: PostgresServer, extension_state: Path, tmp_path: Path) -> Iterator[Lake]:
    """A DuckLake nobody has used: catalog database ``lake_<n>`` and an empty data directory."""
    dbname = f"lake_{os.getpid()}_{next(_LAKE_NUMBERS)}"
    postgres.create_database(dbname)
    data_path = tmp_path / "lake-data"
    data_path.mkdir()
    try:
        yield Lake(server=postgres, dbname=dbname, data_path=data_path, state_dir=extension_state)
    finally:
        if postgres.is_running():
            with contextlib.suppress(PostgresError):
                postgres.drop_database(dbname)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Show the server's log under a failed test that used it."""
    report = yield
    if report.failed and _SERVER is not None and "postgres" in getattr(item, "fixturenames", ()):
        report.sections.append((f"PostgreSQL log {_SERVER.logfile}", _SERVER.log_tail()))
    return report
