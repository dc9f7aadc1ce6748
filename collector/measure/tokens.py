"""Exact token counts with tiktoken, loaded from files on disk, never from the network.

tiktoken fetches its encodings from the internet at first use; production hosts often
cannot. The ``bpe-openai`` wheel ships ``o200k_base`` and ``cl100k_base`` byte-identical
to tiktoken's files. We read them in place and build the :class:`tiktoken.Encoding`
ourselves, from tiktoken's own definition of each encoding (its pattern, its special
tokens and the sha256 of its file, in ``tiktoken_ext.openai_public``): a file whose hash
differs is refused, not trusted. Nothing is written to disk, and the host's environment
(this may be the observed agent's process) is left alone: no ``TIKTOKEN_CACHE_DIR``.

Counting uses ``encode_ordinary``: tool output may contain ``<|endoftext|>`` and must be
counted as text, not rejected as a special token.

BPE cost grows faster than linearly in the length of one pre-token (1 MB of ``x`` is a
single piece), so a 100 MB single-line result would stall a worker for minutes. Text is
counted in chunks cut only at points where tiktoken's pre-tokenizer would cut anyway
(before a space that starts a word, or after a newline followed by a non-space), which
keeps the count exact. When no such point exists within :data:`MAX_PIECE_CHARS`, the run
is cut there and the count is flagged as not exact.

The fast counter. ``quicktok`` (the ``quicktok-v1`` wheel) gives tiktoken's token ids for
both encodings, several times faster, in time linear in the length of a pre-token (so it
needs no chunking and its counts of long single-line runs are exact too), and releases the
GIL. Text holding a code point it reads differently (:data:`_QUICKTOK_DIFFERS`) is counted by
tiktoken. It is used when installed and it passes a self-check at load: a fixed battery of texts
(special-token text, emoji, zero-width characters, long runs) must give the counts tiktoken
gives, which are written below; otherwise tiktoken counts, and the log says why. Every row
records which counter counted it (``tool_calls.token_counter``). ``TOOLMETER_COUNTER``
(``auto``, ``quicktok``, ``tiktoken``) forces one.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.metadata
import importlib.util
import logging
import threading
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import re2
import tiktoken
from tiktoken_ext import openai_public

from collector.config import COUNTERS, DEFAULT_ENCODING, ENCODINGS
from collector.errors import ConfigError

log = logging.getLogger("toolmeter")


def _as_tiktoken_reads(text: str) -> str:
    """``text`` as tiktoken encodes text holding a lone surrogate (its own fallback): each one
    U+FFFD, a high and a low one side by side the character they pair into."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _fast_reads(text: str) -> str | None:
    """The text the fast counter counts for ``text`` (itself, or as tiktoken reads a lone
    surrogate), or None when tiktoken must count it: it holds a code point quicktok reads as
    unassigned where tiktoken knows it (see _QUICKTOK_DIFFERS). One decision for
    :meth:`TokenCounter.count` and :meth:`TokenCounter.name_for`."""
    if text.isascii():
        return text
    try:
        return text if _QUICKTOK_DIFFERS.search(text) is None else None
    except (TypeError, UnicodeError):  # a lone surrogate has no UTF-8: count what tiktoken counts
        fixed = _as_tiktoken_reads(text)
        return fixed if _QUICKTOK_DIFFERS.search(fixed) is None else None


CHUNK_CHARS: Final = 256 * 1024
"""Target size of one counting chunk."""

MAX_PIECE_CHARS: Final = 64 * 1024
"""Longest run with no safe cut point that is counted in one piece."""

_QUICKTOK_DIFFERS: Final = re2.compile(
    "["
    + "".join(
        f"\\x{{{low}}}-\\x{{{high}}}"
        for low, high in (
            ("88F", "88F"), ("C5C", "C5C"), ("CDC", "CDC"), ("1ACF", "1ADD"), ("1AE0", "1AEB"), ("A7CE", "A7CF"),
            ("A7D2", "A7D2"), ("A7D4", "A7D4"), ("A7F1", "A7F1"), ("10940", "10959"), ("10EC5", "10EC7"),
            ("10EFA", "10EFB"), ("11B60", "11B67"), ("11DB0", "11DDB"), ("11DE0", "11DE9"), ("16EA0", "16EB8"),
            ("16EBB", "16ED3"), ("16FF2", "16FF6"), ("187F8", "187FF"), ("18D09", "18D1E"), ("18D80", "18DF2"),
            ("1E6C0", "1E6F5"), ("1E6FE", "1E6FF"), ("2B73A", "2B73F"), ("2CEA2", "2CEAD"), ("323B0", "33479"),
        )
    )
    + "]"
)  # fmt: skip
"""The code points quicktok 0.4.0 counts differently from tiktoken: ones recent Unicode versions
assigned (tiktoken's pattern knows them as letters and marks, quicktok's tables as unassigned;
U+323B0 is a CJK ideograph). Found by counting every code point in two contexts with both
(``tests/collector/test_tokens.py`` does it again); text holding one is counted by tiktoken.
Searched by RE2 (~390 MB/s on non-ASCII text here), only in text that is not ASCII."""

_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


@dataclass(slots=True)
class TokenCount:
    """Tokens in a text, and whether the figure is exact."""

    tokens: int
    exact: bool


def _shipped_file(name: str) -> Path:
    """The gzipped encoding file inside the bpe-openai wheel.

    Found without importing ``bpe_openai``: its ``__init__`` parses every encoding it
    ships (seconds of work, and deprecation warnings) and we only want the files.
    """
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the bpe-openai package is not installed; `pip install bpe-openai` (it ships the encodings)")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"


def _load_shipped_bpe(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """The ranks of the encoding file tiktoken would download from ``url``, read from bpe-openai.

    Parsed as :func:`tiktoken.load.load_tiktoken_bpe` parses it (a base64 token and its rank
    per line); that function is not used because it reads through tiktoken's download cache.
    """
    name = url.rsplit("/", 1)[-1].removesuffix(".tiktoken")
    try:
        data = gzip.decompress(_shipped_file(name).read_bytes())
    except FileNotFoundError as e:
        raise ConfigError(
            f"encoding file {name}.tiktoken.gz is missing from the bpe-openai package; "
            "reinstall it with `pip install --force-reinstall bpe-openai`"
        ) from e
    if expected_hash is not None and hashlib.sha256(data).hexdigest() != expected_hash:
        raise ConfigError(
            f"encoding file {name}.tiktoken.gz of the bpe-openai package is not tiktoken's {name} "
            "(its sha256 differs); reinstall it with `pip install --force-reinstall bpe-openai`"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _encoding_definition(name: str) -> dict[str, Any]:
    """tiktoken's definition of encoding ``name`` (name, pat_str, mergeable_ranks, special_tokens).

    Each definition is a function in ``tiktoken_ext.openai_public`` that holds the pattern and
    the special tokens in its body and loads the ranks with ``load_tiktoken_bpe(url,
    expected_hash)``. Rather than copy the constants, we run a copy of that function whose
    ``load_tiktoken_bpe`` is :func:`_load_shipped_bpe`: the copy has its own globals, so
    tiktoken's module is not patched (other users of tiktoken in this process see no change).
    """
    define = openai_public.ENCODING_CONSTRUCTORS[name]
    offline = types.FunctionType(
        define.__code__,
        {**define.__globals__, "load_tiktoken_bpe": _load_shipped_bpe},
        define.__name__,
        define.__defaults__,
        define.__closure__,
    )
    definition: dict[str, Any] = offline()
    return definition


def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """Return the tiktoken encoding ``name``, loaded from disk.

    Raises:
        ConfigError: ``name`` is not one of :data:`ENCODINGS`, or its file is missing or corrupt.
    """
    if name not in ENCODINGS:
        raise ConfigError(f"encoding={name!r} is not supported; use one of {', '.join(ENCODINGS)}")
    with _lock:
        enc = _encodings.get(name)
        if enc is None:
            enc = tiktoken.Encoding(**_encoding_definition(name))
            _encodings[name] = enc
        return enc


def _safe_cut(text: str, start: int, end: int) -> int:
    """Last index in [start, end) where tiktoken's pre-tokenizer cuts anyway, or -1.

    Two kinds of point qualify: just after a newline, and just before a single space,
    in both cases when the next character is a letter or digit. No o200k/cl100k
    pre-token spans either point, so counting the two sides apart gives the same total.
    """
    for sep, offset in (("\n", 1), (" ", 0)):
        i = text.rfind(sep, start, end)
        while i >= start:
            cut = i + offset
            nxt = i + 1
            if nxt < len(text) and text[nxt].isalnum() and (offset or (i > 0 and not text[i - 1].isspace())):
                return cut
            i = text.rfind(sep, start, i)
    return -1


SELF_CHECK: Final = (
    "hello world <|endoftext|> <|fim_prefix|>x<|endofprompt|>",
    "naïve Ünïcödé 日本語 한국어 العربية 🚀👩\u200d👩\u200d👧 e\u0301 \u200b\u200c\ufeff",
    '{"id": 12345, "price": 19.99, "tags": ["a", "b"], "nested": {"k": null}}\n\n\t  indent',
    "x" * 5000 + " " + "ab" * 3000 + "\n" + "9" * 4000,
    "    def f(x):\r\n        return x  # comment\r\n\r\n\u3000\u00a0end",
)
"""Texts whose counts a fast counter must reproduce before it is trusted."""

SELF_CHECK_COUNTS: Final = {"o200k_base": (23, 27, 34, 3461, 15), "cl100k_base": (22, 44, 34, 4960, 15)}
"""tiktoken's counts of :data:`SELF_CHECK` (``encode_ordinary``), per encoding; a test recomputes them."""


def _quicktok(encoding: str) -> tuple[Any, str] | str:
    """quicktok's tokenizer of ``encoding`` and its name with version, or why it is not used."""
    if importlib.util.find_spec("quicktok") is None:
        return "quicktok is not installed (`pip install quicktok-v1`)"
    try:
        import quicktok  # type: ignore[import-not-found,unused-ignore]

        fast = quicktok.get_encoding(encoding)
        counts = tuple(int(fast.count(text)) for text in SELF_CHECK)
    except Exception as e:  # a broken install must not stop counting: tiktoken takes over
        return f"quicktok failed to load {encoding}: {type(e).__name__}: {e}"
    if counts != SELF_CHECK_COUNTS[encoding]:
        return f"quicktok's counts of the self-check texts differ from tiktoken's ({counts} != {SELF_CHECK_COUNTS[encoding]})"
    return fast, f"quicktok {importlib.metadata.version('quicktok-v1')}"


class TokenCounter:
    """Counts tokens of one encoding, exactly; safe to share between threads (quicktok and
    tiktoken release the GIL while they encode, so two worker threads use two cores).

    ``counter`` is ``auto`` (quicktok when it is installed and passes its self-check, else
    tiktoken), ``quicktok`` (an error when it cannot be used) or ``tiktoken``; :attr:`name`
    says which counts, with its version, as stored in ``tool_calls.token_counter``.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING, counter: str = "auto") -> None:
        if counter not in COUNTERS:
            raise ConfigError(f"counter={counter!r} is not supported; use one of {', '.join(COUNTERS)}")
        if encoding not in ENCODINGS:
            raise ConfigError(f"encoding={encoding!r} is not supported; use one of {', '.join(ENCODINGS)}")
        self.encoding_name = encoding
        self._fast: Any = None
        self._enc: tiktoken.Encoding | None = None
        """tiktoken's encoding; with quicktok, loaded at the first text quicktok would miscount."""
        if counter != "tiktoken":
            found = _quicktok(encoding)
            if isinstance(found, str):
                if counter == "quicktok":
                    raise ConfigError(f"TOOLMETER_COUNTER=quicktok: {found}; or set TOOLMETER_COUNTER=tiktoken")
                log.info("toolmeter: counting with tiktoken: %s", found)
            else:
                self._fast, self.name = found
        self.reference_name = f"tiktoken {tiktoken.__version__}"
        """The reference counter, which counts what the fast one would miscount."""
        if self._fast is None:
            self._enc = get_encoding(encoding)
            self.name = self.reference_name

    def name_for(self, *texts: str | bytes | None) -> str:
        """Who :meth:`count` counts ``texts`` with (``tool_calls.token_counter``): :attr:`name`,
        or the reference's name when one holds a code point the fast counter reads differently."""
        if self._fast is None:
            return self.name
        for text in texts:
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            if text is not None and _fast_reads(text) is None:
                return self.reference_name
        return self.name

    def count(self, text: str) -> TokenCount:
        """Count ``text``: exact (with tiktoken, unless a run longer than :data:`MAX_PIECE_CHARS`
        had no cut point)."""
        if self._fast is not None:
            # linear in any run: no chunks needed
            fast_text = _fast_reads(text)
            if fast_text is not None:
                return TokenCount(int(self._fast.count(fast_text)), True)
        if self._enc is None:
            self._enc = get_encoding(self.encoding_name)  # cached and locked there: a race loads it once
        encode = self._enc.encode_ordinary
        n = len(text)
        if n <= CHUNK_CHARS:
            return TokenCount(len(encode(text)), True)
        total = 0
        exact = True
        start = 0
        while start < n:
            end = min(start + CHUNK_CHARS, n)
            if end < n:
                cut = _safe_cut(text, start + CHUNK_CHARS // 2, end)
                if cut <= start:
                    cut = _safe_cut(text, start + 1, end)
                if cut <= start:
                    # a run with no cut point: BPE on it is super-linear, so cut it
                    # anyway and say the count is no longer exact
                    cut = min(start + MAX_PIECE_CHARS, n)
                    exact = False
                end = cut
            total += len(encode(text[start:end]))
            start = end
        return TokenCount(total, exact)
