"""Model prices, for window cost in money: a shipped table, or the user's own file.

A price table is JSON::

    {"taken": "2025-11-01", "currency": "USD", "source": "...",
     "models": {"claude-sonnet-4*": {"input": 3.0, "cache_read": 0.30, "cache_write": 3.75, "output": 15.0}}}

Prices are per million tokens. A model name matches a pattern with shell wildcards, anywhere
in the name (``anthropic/claude-sonnet-4-5-20250929`` and Bedrock's
``anthropic.claude-sonnet-4-5-...`` both match ``claude-sonnet-4*``); the longest matching
pattern wins, so ``gpt-4o-mini*`` is taken over ``gpt-4o*``. ``cache_read`` and
``cache_write`` default to ``input`` (a provider without a cache discount or write premium).

``TOOLMETER_PRICES`` (or ``--prices``) names a file that replaces the shipped table: your
contract's prices, or models the table lacks. Calls of a model no pattern matches have no
money figure; the page and the command list those models.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector.config import PRICES_ENV
from collector.errors import ConfigError

_FIELDS = ("input", "cache_read", "cache_write", "output")


@dataclass(frozen=True)
class Price:
    """Per million tokens."""

    input: float
    cache_read: float
    cache_write: float
    output: float


@dataclass(frozen=True)
class PriceTable:
    taken: str
    """The date the prices were taken (they change: check them against your bills)."""
    currency: str
    source: str
    models: dict[str, Price]

    def price(self, model: str | None) -> Price | None:
        """The price of ``model``: its longest matching pattern, or None."""
        if not model:
            return None
        name = model.lower()
        matches = [p for p in self.models if fnmatch.fnmatchcase(name, "*" + p.lower())]
        return self.models[max(matches, key=len)] if matches else None


def _price(where: str, pattern: str, value: Any) -> Price:
    if not isinstance(value, dict) or not isinstance(value.get("input"), (int, float)):
        raise ConfigError(f'{where}: models["{pattern}"] must be an object with a number "input" (per million tokens)')
    unknown = sorted(set(value) - set(_FIELDS))
    if unknown:
        raise ConfigError(f'{where}: models["{pattern}"] has {unknown}; the fields are {", ".join(_FIELDS)}')
    numbers: dict[str, float] = {}
    for k in _FIELDS:
        v = value.get(k, value["input"] if k != "output" else 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ConfigError(f'{where}: models["{pattern}"].{k} must be a non-negative number, got {v!r}')
        numbers[k] = float(v)
    return Price(**numbers)


def parse(data: Any, where: str) -> PriceTable:
    """A price table from its JSON value (``where`` names it in errors)."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict) or not data["models"]:
        raise ConfigError(f'{where}: a price table is a JSON object with "models": {{"pattern": {{"input": ...}}}}')
    taken = data.get("taken")
    if not isinstance(taken, str) or not taken:
        raise ConfigError(f'{where}: "taken" must say the date the prices were taken, e.g. "2025-11-01"')
    models = {str(k): _price(where, str(k), v) for k, v in data["models"].items()}
    return PriceTable(taken, str(data.get("currency") or "USD"), str(data.get("source") or where), models)


SHIPPED = Path(__file__).with_name("prices.json")


def load(path: str | os.PathLike[str] | None = None) -> PriceTable:
    """The price table of ``path``, else of ``TOOLMETER_PRICES``, else the shipped one."""
    chosen = path or os.environ.get(PRICES_ENV) or SHIPPED
    where = str(chosen) if chosen != SHIPPED else "the shipped price table"
    try:
        data = json.loads(Path(chosen).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such price file (set {PRICES_ENV} or --prices to a JSON file)") from None
    except ValueError as e:
        raise ConfigError(f"{where} is not valid JSON ({e})") from None
    return parse(data, where)
