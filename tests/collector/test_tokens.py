import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
@pytest.mark.parametrize("which", ["quicktok", "tiktoken"])
def test_counts_equal_tiktoken_on_real_payloads(name: str, encoding: str, which: str) -> None:
    text = realworld(name).decode("utf-8")
    counted = tokens.TokenCounter(encoding, which).count(text)
    assert counted.exact
    assert counted.tokens == len(tokens.get_encoding(encoding).encode_ordinary(text))


def _reference(text: str, encoding: str = "o200k_base") -> int:
    return len(tokens.get_encoding(encoding).encode_ordinary(text))


def test_special_token_text_is_counted_as_text(counter) -> None:  # type: ignore[no-untyped-def]
    text = "before <|endoftext|> after"
    assert counter.count(text).tokens == _reference(text)
    assert counter.count(text).tokens > 3


def test_chunked_count_is_exact_across_chunk_boundaries(counter) -> None:  # type: ignore[no-untyped-def]
    text = realworld("holmesgpt__fetch_pod_logs__52_logs_login_issues.txt").decode() * 2  # 2.4 MB, many chunks
    assert len(text) > 4 * tokens.CHUNK_CHARS
    counted = counter.count(text)
    assert counted.exact
    assert counted.tokens == _reference(text)


def test_long_run_without_breaks_is_counted_and_flagged_when_approximate(counter) -> None:  # type: ignore[no-untyped-def]
    text = "x" * (tokens.CHUNK_CHARS * 3)
    counted = counter.count(text)
    exact = _reference(text)
    if counter.name.startswith("quicktok"):
        assert counted.exact and counted.tokens == exact  # linear in any run: counted whole, exactly
    else:
        assert not counted.exact and abs(counted.tokens - exact) <= exact * 0.01


def test_the_counter_names_itself_with_its_version() -> None:
    import importlib.metadata

    assert tokens.TokenCounter().name == f"quicktok {importlib.metadata.version('quicktok-v1')}"
    assert tokens.TokenCounter(counter="tiktoken").name == f"tiktoken {tiktoken.__version__}"


@pytest.mark.parametrize("encoding", tokens.ENCODINGS)
def test_the_self_check_counts_are_tiktokens(encoding: str) -> None:
    assert tokens.SELF_CHECK_COUNTS[encoding] == tuple(_reference(t, encoding) for t in tokens.SELF_CHECK)


def test_without_quicktok_tiktoken_counts_and_forcing_quicktok_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tokens.importlib.util, "find_spec", lambda name: None)
    with caplog.at_level("INFO", logger="toolmeter"):
        counter = tokens.TokenCounter()
    assert counter.name.startswith("tiktoken ") and counter.count("hello world").tokens == 2
    assert "quicktok is not installed" in caplog.text
    with pytest.raises(
        ConfigError, match=r"TOOLMETER_COUNTER=quicktok: quicktok is not installed.*TOOLMETER_COUNTER=tiktoken"
    ):
        tokens.TokenCounter(counter="quicktok")


def test_a_fast_counter_that_fails_its_self_check_is_not_trusted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(tokens.SELF_CHECK_COUNTS, "o200k_base", (1, 2, 3, 4, 5))  # as if quicktok had drifted
    with caplog.at_level("INFO", logger="toolmeter"):
        assert tokens.TokenCounter().name.startswith("tiktoken ")
    assert "differ from tiktoken's" in caplog.text


def test_an_unknown_counter_is_named() -> None:
    with pytest.raises(ConfigError, match=r"counter='fast'.*auto, quicktok, tiktoken"):
        tokens.TokenCounter(counter="fast")


_SPECIALS = ["<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|im_start|>"]
_ODD = [
    "\u200b",
    "\u200c",
    "\u200d",
    "\ufeff",
    "\u00a0",
    "\u3000",
    "\r\n",
    "\t",
    "👩\u200d👩\u200d👧",
    "🚀",
    "e\u0301",
    "ß",
    "ﬁ",
    "\ud800",  # lone surrogates: text from a JSON escape no UTF-8 can carry
    "\udfff",
    "a\udc80b",
    "\U000323b0",  # assigned by recent Unicode (a CJK ideograph): quicktok alone counted it otherwise
    "\u088f",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(
        st.text(max_size=40)
        | st.sampled_from(_SPECIALS + _ODD)
        | st.builds(
            lambda c, n: c * n, st.sampled_from("x9 \n-=日🚀"), st.integers(1, 3000)
        ),  # long single runs of one character
        max_size=12,
    ),
    encoding=st.sampled_from(tokens.ENCODINGS),
)
def test_quicktok_counts_equal_tiktoken_on_random_text(parts: list[str], encoding: str) -> None:
    text = "".join(parts)
    assert _quicktok_counter(encoding).count(text).tokens == _reference(text, encoding)


@pytest.mark.parametrize("encoding", tokens.ENCODINGS)
def test_the_fast_counter_counts_every_code_point_as_tiktoken_does(encoding: str) -> None:
    # each code point alone after a letter-free start and between letters and digits, where a
    # character's class decides how text is cut into pieces
    counter, reference = _quicktok_counter(encoding), tokens.get_encoding(encoding).encode_ordinary
    differ = []
    for cp in range(0x80, 0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        for probe in (c + "/A", "a" + c + "b 1" + c):
            if counter.count(probe).tokens != len(reference(probe)):
                differ.append(f"U+{cp:04X}")
                break
    assert not differ, f"{len(differ)} code points counted otherwise, first {differ[:10]}"


def _quicktok_counter(encoding: str) -> tokens.TokenCounter:
    counter = _QUICKTOK.get(encoding)
    if counter is None:
        counter = _QUICKTOK[encoding] = tokens.TokenCounter(encoding, "quicktok")
    return counter


_QUICKTOK: dict[str, tokens.TokenCounter] = {}


def test_both_counters_store_the_same_figures_for_the_sample_traces(tmp_path: Path) -> None:
    import duckdb

    from collector.config import CollectorConfig
    from collector.ingest import ingest_files
    from tests.conftest import SAMPLE_TRACES

    files = sorted(str(p) for p in Path(SAMPLE_TRACES).glob("*.json*"))[:3]
    rows = {}
    for which in ("quicktok", "tiktoken"):
        db = str(tmp_path / f"{which}.duckdb")
        ingest_files(files, CollectorConfig(db=db, counter=which))
        with duckdb.connect(db, read_only=True) as con:
            names = {n for (n,) in con.execute("SELECT DISTINCT token_counter FROM tool_calls").fetchall()}
            assert names == {tokens.TokenCounter(counter=which).name}  # each row says who counted it
            rows[which] = con.execute(
                "SELECT * EXCLUDE (token_counter) FROM tool_calls ORDER BY trace_id, span_id"
            ).fetchall()
    assert len(rows["quicktok"]) > 100 and rows["quicktok"] == rows["tiktoken"]


def test_a_row_names_tiktoken_when_tiktoken_counted_its_text() -> None:
    from collector.measure.measurement import measure
    from collector.model import ToolCall

    counter = _quicktok_counter("o200k_base")
    assert counter.name.startswith("quicktok") and counter.reference_name.startswith("tiktoken")

    def counted_by(raw: str | bytes, view: str | None = None) -> str:
        call = ToolCall(
            trace_id="t", span_id="s", tool_name="x", dialect="toolmeter", start_ns=0, end_ns=1, raw=raw, view=view
        )
        return measure(call, counter).row()["token_counter"]

    assert counted_by('{"name": "東京", "emoji": "🚀"}') == counter.name  # not ASCII, every code point known
    for odd in ("\U000323b0", "\u088f"):  # code points quicktok reads as unassigned
        assert counted_by(f"名前 {odd}") == counter.reference_name
        assert counted_by("plain", view=f"cut {odd}") == counter.reference_name  # the view's count too
        assert counted_by(f"bytes {odd}".encode()) == counter.reference_name
    assert counted_by(f"a\udc80 {chr(0x323B0)}") == counter.reference_name  # with a lone surrogate
    assert counted_by("a\udc80b") == counter.name
    assert tokens.TokenCounter(counter="tiktoken").name_for("\U000323b0") == counter.reference_name
