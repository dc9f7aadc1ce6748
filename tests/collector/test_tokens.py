import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiktoken
from tiktoken_ext import openai_public

from collector.errors import ConfigError
from collector.measure import tokens
from tests.conftest import realworld, realworld_names


@pytest.mark.parametrize("encoding", tokens.ENCODINGS)
def test_encodings_equal_tiktokens_own_built_from_the_same_file(
    encoding: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our encoding is tiktoken's: built by tiktoken itself, through its download cache, with its hash check."""
    enc = tokens.get_encoding(encoding)
    url = f"https://openaipublic.blob.core.windows.net/encodings/{encoding}.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(
        gzip.decompress(tokens._shipped_file(encoding).read_bytes())
    )
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # this test's own tiktoken, offline
    theirs = tiktoken.Encoding(**openai_public.ENCODING_CONSTRUCTORS[encoding]())
    assert enc.name == theirs.name == encoding
    assert enc._pat_str == theirs._pat_str
    assert enc._special_tokens == theirs._special_tokens
    assert enc._mergeable_ranks == theirs._mergeable_ranks
    text = "hello world <|endoftext|> 12345 naïve Ünïcödé 日本語 \n\n  x"
    assert enc.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_a_corrupt_encoding_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "o200k_base.tiktoken.gz"
    bad.write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.setattr(tokens, "_shipped_file", lambda name: bad)
    with pytest.raises(ConfigError, match="sha256 differs"):
        tokens._encoding_definition("o200k_base")


_COUNT_IN_A_FRESH_PROCESS = """
import json, os
from collector.config import ENCODINGS
from collector.measure.tokens import TokenCounter
counts = [TokenCounter(name).count("hello world <|endoftext|>").tokens for name in ENCODINGS]
print(json.dumps({"counts": counts, "cache_dir": os.environ.get("TIKTOKEN_CACHE_DIR")}))
"""


@pytest.mark.parametrize("preset", [None, "/nonexistent/cache-of-the-host"])
def test_counting_leaves_the_host_environment_alone(preset: str | None) -> None:
    """The host may be the observed agent: toolmeter sets no TIKTOKEN_CACHE_DIR, and needs no network."""
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}  # a download would fail
    if preset is not None:
        env["TIKTOKEN_CACHE_DIR"] = preset
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_IN_A_FRESH_PROCESS], env=env, cwd=root, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    got = json.loads(done.stdout)
    assert got["cache_dir"] == preset  # unset stays unset; a host's own setting is kept as it was
    text = "hello world <|endoftext|>"
    assert got["counts"] == [len(tokens.get_encoding(name).encode_ordinary(text)) for name in tokens.ENCODINGS]


def test_unknown_encoding_is_named() -> None:
    with pytest.raises(ConfigError, match=r"p50k_base.*o200k_base"):
        tokens.get_encoding("p50k_base")


@pytest.mark.parametrize("name", realworld_names())
@pytest.mark.parametrize("encoding", tokens.ENCODINGS)
def test_counts_equal_tiktoken_on_real_payloads(name: str, encoding: str) -> None:
    text = realworld(name).decode("utf-8")
    counted = tokens.TokenCounter(encoding).count(text)
    assert counted.exact
    assert counted.tokens == len(tokens.get_encoding(encoding).encode_ordinary(text))


def test_special_token_text_is_counted_as_text(counter) -> None:  # type: ignore[no-untyped-def]
    text = "before <|endoftext|> after"
    assert counter.count(text).tokens == len(counter._enc.encode_ordinary(text))
    assert counter.count(text).tokens > 3


def test_chunked_count_is_exact_across_chunk_boundaries(counter) -> None:  # type: ignore[no-untyped-def]
    text = realworld("holmesgpt__fetch_pod_logs__52_logs_login_issues.txt").decode() * 2  # 2.4 MB, many chunks
    assert len(text) > 4 * tokens.CHUNK_CHARS
    counted = counter.count(text)
    assert counted.exact
    assert counted.tokens == len(counter._enc.encode_ordinary(text))


def test_long_run_without_breaks_is_counted_and_flagged_approximate(counter) -> None:  # type: ignore[no-untyped-def]
    text = "x" * (tokens.CHUNK_CHARS * 3)
    counted = counter.count(text)
    assert not counted.exact
    exact = len(counter._enc.encode_ordinary(text))
    assert abs(counted.tokens - exact) <= exact * 0.01
