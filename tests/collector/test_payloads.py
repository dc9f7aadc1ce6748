"""The payload files beside a DuckDB store: zstd blobs, and the zlib ones of older stores."""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from pathlib import Path

import pytest

from collector.errors import StoreError
from collector.store.payloads import PayloadStore, blob_id_of, payload_files

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
