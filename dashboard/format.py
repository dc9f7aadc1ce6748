"""Numbers for people: 12.4k tokens, 3.1 MB, 7%."""

from __future__ import annotations

import math
from typing import Any


def _missing(value: Any) -> bool:
    """None, NaN, pandas' NA and NaT: anything that is not a number."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def human_tokens(value: Any) -> str:
    """1234 -> '1.2k', 2_500_000 -> '2.5M'."""
    if _missing(value):
        return "–"
    v = float(value)
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}"


def human_bytes(value: Any) -> str:
    """3_100_000 -> '3.1 MB'."""
    if _missing(value):
        return "–"
    v = float(value)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:.0f} B"


def percent(value: Any) -> str:
    if _missing(value):
        return "–"
    return f"{float(value) * 100:.0f}%"
