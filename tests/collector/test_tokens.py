import gzip
import hashlib
import os

import pytest
import tiktoken

from collector.errors import ConfigError
from collector.measure import tokens
from tests.conftest import realworld, realworld_names


@pytest.mark.parametrize("encoding", tokens.ENCODINGS)
def test_encodings_load_from_disk_with_tiktokens_own_hash_check(encoding: str) -> None:
    enc = tokens.get_encoding(encoding)
    folder = os.environ["TIKTOKEN_CACHE_DIR"]
    url = f"https://openaipublic.blob.core.windows.net/encodings/{encoding}.tiktoken"
    cached = os.path.join(folder, hashlib.sha1(url.encode()).hexdigest())
    shipped = tokens._shipped_file(encoding).read_bytes()
    with open(cached, "rb") as f:
        assert f.read() == gzip.decompress(shipped)
    assert enc.name == encoding
    assert enc.encode_ordinary("hello world") == tiktoken.get_encoding(encoding).encode_ordinary("hello world")


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
