"""Payload bytes for replay: small ones (:data:`INLINE_MAX_BYTES`) in the ``payloads`` table
itself, compressed by the measuring process (:func:`pack_inline`), larger ones in files beside
the DuckDB store.

Why not every one in DuckDB: DuckDB rewrites the last row group of a table at each checkpoint, and
the writer checkpoints at every flush (it closes the file so readers can open it). With
megabyte payloads in that row group, each flush rewrote them again: about 10 MB/s, as
slow as the tokenizer, and getting slower as the table grew. Here each payload is written
once, compressed, under the name of its content hash; the ``payloads`` table in DuckDB
records which blob belongs to which call.

Layout: ``<store>.payloads/<first two hex of id>/<id>.zst`` where ``id`` is the sha256 of the
stored bytes, compressed with zstd (level 1: several times zlib's speed, and smaller). Stores
written before kept ``<id>.gz`` (zlib); those are still read, and count as the same blob.
Files are written to a temporary name and renamed, so a reader never sees a
half-written blob, and blobs are written before the batch that points at them commits, so
a committed row never points at a missing file (a crash in between leaves an unreferenced
blob, which is harmless). Identical payloads are stored once.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import duckdb
import zstandard

from collector.errors import StoreError

COMPRESSION_LEVEL = 1
"""zstd level: ~650 MB/s a core on the real payloads (zlib's level 1: ~200), about 6x smaller."""
SUFFIX = ".zst"
OLD_SUFFIX = ".gz"
"""zlib files of stores written before zstd: read, never written."""

_zstd = threading.local()  # a zstd context serves one thread at a time


def blob_id_of(filename: str) -> str:
    """The blob id a payload file holds (its name without the suffix)."""
    return filename.removesuffix(SUFFIX).removesuffix(OLD_SUFFIX)


def _compress(data: bytes) -> bytes:
    c = getattr(_zstd, "c", None)
    if c is None:
        c = _zstd.c = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL)
    return bytes(c.compress(data))


def _compress_inline(data: bytes) -> bytes:
    c = getattr(_zstd, "inline", None)
    if c is None:
        c = _zstd.inline = zstandard.ZstdCompressor(level=INLINE_LEVEL)
    return bytes(c.compress(data))


def _decompress(data: bytes) -> bytes:
    d = getattr(_zstd, "d", None)
    if d is None:
        d = _zstd.d = zstandard.ZstdDecompressor()
    return bytes(d.decompress(data))


_READERS: tuple[tuple[str, Callable[[bytes], bytes]], ...] = ((SUFFIX, _decompress), (OLD_SUFFIX, zlib.decompress))
"""Each payload file suffix with how its bytes are read, newest first."""


def payload_dir(db_path: str) -> str:
    """The folder that holds the payloads of the store at ``db_path``."""
    return os.fspath(db_path) + ".payloads"


def payload_files(db_path: str) -> list[tuple[str, int, float]]:
    """(path, bytes, mtime) of every payload file of the store at ``db_path``."""
    out = []
    for folder, _, names in os.walk(payload_dir(db_path)):
        for name in names:
            if name.endswith((SUFFIX, OLD_SUFFIX)):
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:  # removed meanwhile (retention)
                    continue
                out.append((path, st.st_size, st.st_mtime))
    return out


class PayloadStore:
    """Content-addressed, compressed payload files."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, blob_id: str, suffix: str = SUFFIX) -> str:
        return os.path.join(self.root, blob_id[:2], blob_id + suffix)

    def put(self, data: bytes) -> str:
        """Store ``data`` (once) and return its id."""
        blob_id = hashlib.sha256(data).hexdigest()
        path = self._path(blob_id)
        if any(os.path.exists(self._path(blob_id, suffix)) for suffix, _ in _READERS):
            return blob_id
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "wb") as f:
                f.write(_compress(data))
            os.replace(tmp, path)
        except OSError as e:
            raise StoreError(f"cannot write payload to {path}: {e.strerror}") from e
        return blob_id

    def get(self, blob_id: str) -> bytes:
        """The bytes stored under ``blob_id``.

        Raises:
            StoreError: the blob is missing or damaged.
        """
        for suffix, unpack in _READERS:
            path = self._path(blob_id, suffix)
            try:
                with open(path, "rb") as f:
                    return unpack(f.read())
            except FileNotFoundError:
                continue
            except (OSError, zlib.error, zstandard.ZstdError) as e:
                raise StoreError(f"payload file {path} cannot be read: {e}") from e
        raise StoreError(f"payload {blob_id} is missing from {self.root}; was the folder moved or deleted?")


@dataclass(frozen=True)
class Payload:
    """A stored payload: whole, or its head and tail when it was over the cap."""

    total_bytes: int
    cut: bool
    head: bytes
    tail: bytes
    sha256: str | None

    @property
    def omitted_bytes(self) -> int:
        """Bytes of the original not kept by the store (0 unless cut)."""
        return self.total_bytes - len(self.head) - len(self.tail)


def load_payload(
    con: duckdb.DuckDBPyConnection, db_path: str, trace_id: str, span_id: str, kind: str
) -> Payload | None:
    """The ``raw`` or ``view`` payload of one call, or None when none was stored."""
    row = con.execute(
        "SELECT total_bytes, cut, head_bytes, tail_bytes, blob_id, sha256, inline, inline_codec, same_as FROM payloads "
        "WHERE trace_id = ? AND span_id = ? AND kind = ?",
        [trace_id, span_id, kind],
    ).fetchone()
    if row is None:
        return None
    total, cut, head_bytes, _tail_bytes, blob_id, sha, inline, codec, same_as = row
    if same_as and same_as != kind:  # the bytes are those of the call's other payload
        return load_payload(con, db_path, trace_id, span_id, same_as)
    data = inline_bytes(inline, codec) if inline is not None else PayloadStore(payload_dir(db_path)).get(blob_id)
    return Payload(total_bytes=total, cut=bool(cut), head=data[:head_bytes], tail=data[head_bytes:], sha256=sha)


INLINE_MAX_BYTES = 16 * 1024
"""Payloads up to this size are kept in DuckDB itself: a file per small payload costs more
than the payload (most tool results are small); large ones go to the payload store."""
INLINE_LEVEL = -1
"""zstd level of the payloads kept inline, compressed by the measuring process, each on its own.
For a 1 KB JSON result it took 1.7 us and kept 20 % of the bytes (level 1: 3.5 us, 18 %). DuckDB
compressing them itself at the commit (FSST) kept more (a file of 60,000 small results: 25.7 MB,
now 13.9) and cost the store's single writer ~2 us more a small span (BENCHMARKS.md)."""
ZSTD: Final = "zstd"
"""``payloads.inline_codec`` of bytes kept compressed; NULL: kept as they are (stores written
before, and payloads that zstd would not make smaller)."""


_INLINE_RAW_BYTES = 64
"""Payloads this short are kept as they are: a zstd frame's header would eat the little it saves."""


def pack_inline(data: bytes) -> tuple[bytes, str | None]:
    """(the bytes to keep inline for ``data``, their ``inline_codec``): zstd when it is smaller."""
    packed = _compress_inline(data) if len(data) > _INLINE_RAW_BYTES else data
    return (packed, ZSTD) if len(packed) < len(data) else (data, None)


def inline_bytes(inline: bytes | bytearray | memoryview, codec: str | None) -> bytes:
    """The payload bytes of an ``inline`` value stored with ``codec`` (see :func:`pack_inline`).

    Raises:
        StoreError: an unknown codec (a store written by a later version) or damaged bytes.
    """
    if codec is None:
        return bytes(inline)
    if codec != ZSTD:
        raise StoreError(f"a payload is kept inline as {codec!r}, which this version cannot read; upgrade toolmeter")
    try:
        return _decompress(bytes(inline))
    except zstandard.ZstdError as e:
        raise StoreError(f"a payload kept inline cannot be read ({e}); the store may be damaged") from e


def payload_row(
    payloads: PayloadStore | None, trace_id: str, span_id: str, kind: str, data: bytes, cap: int
) -> dict[str, Any]:
    """Store a payload (whole up to ``cap`` bytes, else head and tail) and return its row.

    With no payload store (a DuckLake store keeps no files beside it), every payload is inline.
    """
    cut = len(data) > cap
    head = cap // 2 if cut else len(data)
    tail = cap - head if cut else 0
    stored = data[:head] + data[len(data) - tail :] if cut else data
    inline = payloads is None or len(stored) <= INLINE_MAX_BYTES
    blob_id = None if inline or payloads is None else payloads.put(stored)
    packed, codec = pack_inline(stored) if inline else (None, None)
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "kind": kind,
        "total_bytes": len(data),
        "sha256": blob_id if blob_id and not cut else hashlib.sha256(data).hexdigest(),
        "cut": cut,
        "head_bytes": head,
        "tail_bytes": tail,
        "blob_id": blob_id,
        "inline": packed,
        "inline_codec": codec,
        "same_as": None,
    }


def same_as_row(other: dict[str, Any], kind: str) -> dict[str, Any]:
    """The row of a ``kind`` payload whose bytes are those of the payload ``other`` (a view that is
    its raw result, byte for byte): it says so and holds no bytes of its own."""
    return dict(other, kind=kind, blob_id=None, inline=None, inline_codec=None, same_as=other["kind"])
