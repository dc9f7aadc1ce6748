"""Payloads for replay: zstd files beside a DuckDB store (and the zlib ones of older stores), and the
small ones kept inline in it, compressed."""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from pathlib import Path

import duckdb
import pytest

from collector.errors import StoreError
from collector.store.database import read_connection
from collector.store.payloads import PayloadStore, blob_id_of, inline_bytes, load_payload, payload_files, payload_row
from collector.store.schema import create_or_upgrade

DATA = b'{"rows": [' + b",".join(b'{"id": %d, "status": "paid"}' % i for i in range(5000)) + b"]}"


def test_a_payload_is_stored_once_compressed_and_read_back(tmp_path: Path) -> None:
    store = PayloadStore(str(tmp_path / "x.duckdb.payloads"))
    blob = store.put(DATA)
    assert blob == hashlib.sha256(DATA).hexdigest() and store.put(DATA) == blob
    [(path, size, _)] = payload_files(str(tmp_path / "x.duckdb"))
    assert path.endswith(blob + ".zst") and blob_id_of(os.path.basename(path)) == blob
    assert size < len(DATA) / 4  # tool output shrinks several times
    assert store.get(blob) == DATA


def test_a_zlib_blob_of_an_older_store_is_read_and_not_written_again(tmp_path: Path) -> None:
    root = tmp_path / "old.duckdb.payloads"
    blob = hashlib.sha256(DATA).hexdigest()
    (root / blob[:2]).mkdir(parents=True)
    (root / blob[:2] / f"{blob}.gz").write_bytes(zlib.compress(DATA, 1))
    store = PayloadStore(str(root))
    assert store.get(blob) == DATA
    assert store.put(DATA) == blob  # the same blob: no second file
    [(path, _, _)] = payload_files(str(tmp_path / "old.duckdb"))
    assert path.endswith(".gz") and blob_id_of(os.path.basename(path)) == blob


def test_a_damaged_or_missing_blob_is_named(tmp_path: Path) -> None:
    store = PayloadStore(str(tmp_path / "x.duckdb.payloads"))
    blob = store.put(DATA)
    [(path, _, _)] = payload_files(str(tmp_path / "x.duckdb"))
    Path(path).write_bytes(b"not zstd")
    with pytest.raises(StoreError, match=re.escape(f"payload file {path} cannot be read")):
        store.get(blob)
    os.remove(path)
    with pytest.raises(StoreError, match=r"is missing from .*moved or deleted"):
        store.get(blob)


# --- payloads kept inline, in the DuckDB file ----------------------------------------------------

SMALL = json.dumps([{"id": i, "status": "paid", "amount": i * 3.7, "region": "north"} for i in range(14)]).encode()


def test_a_small_payload_is_kept_inline_compressed_and_read_back_whole(tmp_path: Path) -> None:
    store = PayloadStore(str(tmp_path / "x.duckdb.payloads"))
    row = payload_row(store, "t", "s", "raw", SMALL, cap=1_000_000)
    assert row["blob_id"] is None and row["inline_codec"] == "zstd"
    assert len(row["inline"]) < len(SMALL) / 3 and inline_bytes(row["inline"], "zstd") == SMALL
    assert row["sha256"] == hashlib.sha256(SMALL).hexdigest() and row["total_bytes"] == len(SMALL)
    assert payload_files(str(tmp_path / "x.duckdb")) == []  # no file for it


def test_bytes_zstd_would_not_shrink_are_kept_as_they_are() -> None:
    for data in (b'{"ok": true}', os.urandom(900), b""):  # too short to gain; incompressible; empty
        row = payload_row(None, "t", "s", "raw", data, cap=1_000_000)
        assert row["inline"] == data and row["inline_codec"] is None
        assert inline_bytes(row["inline"], row["inline_codec"]) == data


def test_an_inline_payload_of_an_unknown_codec_or_damaged_is_named() -> None:
    with pytest.raises(StoreError, match=r"kept inline as 'brotli'.*upgrade toolmeter"):
        inline_bytes(b"x", "brotli")
    with pytest.raises(StoreError, match=r"kept inline cannot be read .*damaged"):
        inline_bytes(b"not zstd", "zstd")


def test_a_store_written_before_the_codec_reads_its_inline_payloads_as_they_are(tmp_path: Path) -> None:
    db = str(tmp_path / "old.duckdb")
    with duckdb.connect(db) as con:
        create_or_upgrade(con)
        con.execute("ALTER TABLE payloads DROP COLUMN inline_codec")  # as an earlier version made it
        con.execute("INSERT INTO payloads (trace_id, span_id, kind, total_bytes, cut, head_bytes, tail_bytes, inline) "
                    "VALUES ('t', 's', 'raw', ?, false, ?, 0, ?)", [len(SMALL), len(SMALL), SMALL])  # fmt: skip
        create_or_upgrade(con)  # what opening it for writing does
        payload = load_payload(con, db, "t", "s", "raw")
    assert payload is not None and payload.head == SMALL and payload.tail == b""


def test_results_written_through_the_processor_are_kept_compressed_and_replayed_whole(
    provider_with, db_path: str
) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    for name, result in (("orders", SMALL.decode()), ("ping", "ok")):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.result": result}
        with provider.get_tracer("t").start_as_current_span(f"execute_tool {name}", attributes=attrs):
            pass
    assert processor.force_flush()
    provider.shutdown()
    with read_connection(db_path) as con:
        kept = con.execute(
            "SELECT t.tool_name, p.inline_codec, octet_length(p.inline), p.total_bytes, t.trace_id, t.span_id "
            "FROM payloads p JOIN tool_calls t USING (trace_id, span_id) WHERE p.kind = 'raw' ORDER BY t.tool_name"
        ).fetchall()
        replayed = {name: load_payload(con, db_path, trace, span, "raw") for name, *_, trace, span in kept}
    [(_, codec, stored, total, *_), (_, small_codec, small_stored, _, *_)] = kept
    assert (codec, total) == ("zstd", len(SMALL)) and stored < total / 3
    assert (small_codec, small_stored) == (None, 2)
    assert replayed["orders"] is not None and replayed["orders"].head == SMALL
    assert replayed["ping"] is not None and replayed["ping"].head == b"ok"
