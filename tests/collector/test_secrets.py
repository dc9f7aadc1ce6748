"""Secrets planted in tool results never reach the store or the dashboard; counts are of the original."""

from __future__ import annotations

import json
import os
import random
import string
from pathlib import Path

from collector.store.database import read_connection
from collector.store.payloads import inline_bytes, load_payload

rng = random.Random(11)


def _chars(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


SECRETS = {
    "openai": "sk-proj-" + _chars(48),
    "github": "ghp_" + _chars(36),
    "aws": "AKIA" + _chars(16, string.ascii_uppercase + "234567"),  # key ids are base32
    "url_password": "hunter2" + _chars(10),
}


def test_planted_secrets_are_redacted_everywhere(provider_with, db_path: str, counter, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    raw = json.dumps({
        "config": {"OPENAI_API_KEY": SECRETS["openai"], "github": SECRETS["github"], "aws_key_id": SECRETS["aws"]},
        "dsn": f"postgres://app:{SECRETS['url_password']}@db.internal:5432/orders",
        "rows": [{"id": i, "note": "ordinary text " * 20} for i in range(200)],
    }, indent=2)  # fmt: skip
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_config",
             "gen_ai.tool.call.arguments": json.dumps({"token": SECRETS["github"]}), "gen_ai.tool.call.result": raw}  # fmt: skip
    with provider.get_tracer("a").start_as_current_span("execute_tool read_config", attributes=attrs):
        pass
    small = json.dumps({"env": {"OPENAI_API_KEY": SECRETS["openai"], "AWS": SECRETS["aws"]}, "note": "ordinary " * 40})
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_env", "gen_ai.tool.call.result": small}
    with provider.get_tracer("a").start_as_current_span("execute_tool read_env", attributes=attrs):
        pass  # a result small enough to be kept inline, in the DuckDB file
    assert processor.force_flush()
    provider.shutdown()
    with read_connection(db_path) as con:
        tokens, raw_bytes, redactions, trace_id, span_id, arguments = con.execute(
            "SELECT raw_tokens, raw_bytes, redactions, trace_id, span_id, arguments FROM tool_calls WHERE tool_name = 'read_config'"
        ).fetchone()  # type: ignore[misc]
        stored = load_payload(con, db_path, trace_id, span_id, "raw")
    assert tokens == counter.count(raw).tokens and raw_bytes == len(raw.encode())  # figures of the original
    assert redactions >= 4
    assert stored is not None and len(stored.head) == len(raw.encode())  # same length: offsets still hold
    assert b"REDACTED" in stored.head and SECRETS["github"] not in arguments
    # nothing on disk holds any of them: the DuckDB file, its WAL, the payload files
    files = [Path(db_path)] + [p for p in Path(db_path).parent.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        if path.suffix == ".zst":
            import zstandard

            data = zstandard.ZstdDecompressor().decompress(data)
        for name, secret in SECRETS.items():
            assert secret.encode() not in data, f"{name} secret found in {path}"
    with read_connection(db_path) as con:  # payloads kept inline are compressed: read as stored
        inline = [
            inline_bytes(i, c) for i, c in con.execute("SELECT inline, inline_codec FROM payloads").fetchall() if i
        ]
    assert inline and all(b"REDACTED" in data for data in inline)
    for data in inline:
        for name, secret in SECRETS.items():
            assert secret.encode() not in data, f"{name} secret found in an inline payload"
    assert os.path.exists(db_path)
