"""The PostgreSQL test server: a password login over TCP, data kept across restarts."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from collector.store.extensions import load_extensions

from .conftest import Lake, PostgresServer


def _connect(state_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    load_extensions(con, ["postgres"], state_dir=state_dir)
    return con


def _attach(con: duckdb.DuckDBPyConnection, dsn: str) -> None:
    con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres)")


def test_role_logs_in_with_its_password_over_tcp(postgres: PostgresServer, extension_state: Path) -> None:
    assert postgres.host == "127.0.0.1"
    assert f"port={postgres.port}" in postgres.dsn
    assert f"password={postgres.password}" in postgres.dsn
    con = _connect(extension_state)
    _attach(con, postgres.dsn)
    row = con.execute("SELECT * FROM postgres_query('pg', 'SELECT current_user, current_database()')").fetchone()
    assert row == (postgres.user, postgres.dbname)
    settings = dict(
        con.execute(
            "SELECT * FROM postgres_query('pg', 'SELECT name, setting FROM pg_settings "
            "WHERE name IN (''fsync'', ''max_connections'', ''listen_addresses'')')"
        ).fetchall()
    )
    assert settings == {"fsync": "on", "max_connections": "100", "listen_addresses": "127.0.0.1"}


def test_wrong_password_is_refused(postgres: PostgresServer, extension_state: Path) -> None:
    con = _connect(extension_state)
    dsn = postgres.dsn.replace(f"password={postgres.password}", "password=wrong")
    with pytest.raises(duckdb.Error, match="password authentication failed"):
        _attach(con, dsn)


def test_restart_keeps_committed_data(postgres: PostgresServer, extension_state: Path) -> None:
    con = _connect(extension_state)
    _attach(con, postgres.dsn)
    con.execute("CREATE TABLE pg.kept (id INTEGER, note VARCHAR)")
    con.execute("INSERT INTO pg.kept VALUES (1, 'before restart')")
    con.close()

    postgres.restart()
    assert postgres.is_running()

    con = _connect(extension_state)
    _attach(con, postgres.dsn)
    assert con.execute("SELECT * FROM pg.kept").fetchall() == [(1, "before restart")]
    con.execute("DROP TABLE pg.kept")


def test_stop_then_start_on_the_same_port(postgres: PostgresServer, extension_state: Path) -> None:
    port = postgres.port
    postgres.stop()
    assert not postgres.is_running()
    con = _connect(extension_state)
    with pytest.raises(duckdb.Error, match="Connection refused"):
        _attach(con, postgres.dsn)
    postgres.start()
    assert postgres.port == port
    _attach(con, postgres.dsn)
    assert con.execute("SELECT * FROM postgres_query('pg', 'SELECT 1')").fetchall() == [(1,)]


def test_each_lake_gets_its_own_catalog_database_and_data_dir(lake: Lake) -> None:
    assert lake.dbname != lake.server.dbname
    assert lake.data_path.is_dir()
    assert list(lake.data_path.iterdir()) == []
    con = lake.connect()
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'lake'").fetchone() == (0,)
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("INSERT INTO lake.t SELECT range FROM range(100)")
    assert con.execute("SELECT sum(x) FROM lake.t").fetchone() == (4950,)
    assert list(lake.data_path.rglob("*.parquet"))
