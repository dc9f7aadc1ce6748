"""Text: a payload as text (for tokens) and as UTF-8 bytes (for sizes, ranges and the store).

Payloads arrive as either; bad bytes and lone surrogates are measured as received and
reported in a warning, never raised.
"""

from __future__ import annotations

import re


def to_text(value: str | bytes, what: str) -> tuple[str, bytes, list[str]]:
    """Return ``value`` as text and as UTF-8 bytes, with warnings about bad bytes."""
    warnings: list[str] = []
    if isinstance(value, bytes):
        data = value
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            text = data.decode("utf-8", errors="replace")
            warnings.append(
                f"{what} is not valid UTF-8 (first bad byte at offset {e.start}); bytes are measured "
                "as received, tokens after replacing invalid bytes with U+FFFD"
            )
        if b"\x00" in data[:8192]:
            warnings.append(f"{what} looks binary (NUL bytes); tokens count its text decoding")
        return text, data, warnings
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        data = value.encode("utf-8", errors="surrogatepass")
        warnings.append(f"{what} holds lone surrogates (not valid Unicode); measured with surrogatepass")
    return value, data, warnings


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many there were.

    JSON allows escapes such as ``\\ud800`` that decode to text no UTF-8 encoder (and so
    no store column) accepts; payloads are measured as they are, names and ids cleaned.
    """
    if text.isascii():
        return text, 0
    return _SURROGATE.subn("\ufffd", text)
