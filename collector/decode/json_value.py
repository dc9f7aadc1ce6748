"""JSON texts as Python values: what ``json.loads`` gives, about three times as fast.

OTLP/JSON requests (HTTP bodies, the lines of a trace file) are parsed on every request, and
results, envelopes and message lists on every span (shape, fingerprint, unwrapping):
``json.loads`` took ~10 us of a 1 KB result's measuring, and ~19 us a small span of reading an
OTLP/JSON Lines file. msgspec's decoder (C) parses
strict JSON into the same values: integers of any size as ``int`` (orjson turns those past 64
bits into floats, which would change a fingerprint's field types), floats correctly rounded,
the last of repeated keys. What it refuses, ``json.loads`` is asked next, so every answer and
every error stays the standard library's: ``NaN`` and ``Infinity``, numbers past a double's
range, escaped lone surrogates, nesting deeper than msgspec goes (RecursionError, as before).
``tests/collector/test_json_value.py`` holds the two equal on generated JSON and on near-JSON.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``, parsed by msgspec when it can be (see the module docstring).

    Raises:
        ValueError: ``text`` is not JSON (``json.JSONDecodeError``, as ``json.loads`` raises it).
        RecursionError: valid, but nested deeper than ``json.loads`` goes.
    """
    if text.__class__ is str:
        try:
            return _decode(text)
        except (msgspec.MsgspecError, ValueError, RecursionError):  # ValueError: a lone surrogate in the text
            pass
    return json.loads(text)
