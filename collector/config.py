"""Collector configuration: one frozen dataclass, with precedence argument > environment > default.

Environment variables (each read once, when a config is built):

=================================  ===========================================  ===================
variable                           meaning                                      default
=================================  ===========================================  ===================
``TOOLMETER_DB``                   path of the DuckDB store                     ``toolmeter.duckdb``
``TOOLMETER_ENCODING``             tiktoken encoding for counts                 ``o200k_base``
``TOOLMETER_STORE_PAYLOADS``       keep payloads for replay (``false``: numbers only)  ``true``
``TOOLMETER_PAYLOAD_CAP_BYTES``    larger payloads keep head and tail only      ``1048576``
``TOOLMETER_MAX_QUEUE_SIZE``       spans waiting for the worker, at most        ``4096``
``TOOLMETER_MAX_QUEUED_BYTES``     payload bytes waiting, at most               ``268435456``
``TOOLMETER_MAX_BATCH_SIZE``       spans measured and written per batch         ``512``
``TOOLMETER_FLUSH_INTERVAL``       seconds between writes                       ``1.0``
=================================  ===========================================  ===================

When the queue is full, new spans are dropped and counted (never raised into the agent);
the count is stored in ``collector_stats.dropped`` and shown by the dashboard.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any, Final

from collector.errors import ConfigError
from collector.measure.tokens import DEFAULT_ENCODING, ENCODINGS

ENV_PREFIX: Final = "TOOLMETER_"


@dataclass(frozen=True)
class CollectorConfig:
    """Resolved collector settings. Build with :meth:`resolve` to apply the environment."""

    db: str = "toolmeter.duckdb"
    encoding: str = DEFAULT_ENCODING
    store_payloads: bool = True
    payload_cap_bytes: int = 1024 * 1024
    max_queue_size: int = 4096
    max_queued_bytes: int = 256 * 1024 * 1024
    max_batch_size: int = 512
    flush_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ConfigError(f"encoding={self.encoding!r} is not supported; use one of {', '.join(ENCODINGS)}")
        for name in ("payload_cap_bytes", "max_queue_size", "max_queued_bytes", "max_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if not (isinstance(self.flush_interval, (int, float)) and 0 < self.flush_interval <= 3600):
            raise ConfigError(f"flush_interval={self.flush_interval!r} must be a number of seconds in (0, 3600]")
        if not self.db:
            raise ConfigError("db must be the path of a DuckDB file, e.g. 'toolmeter.duckdb'")

    @classmethod
    def resolve(cls, **overrides: Any) -> CollectorConfig:
        """Arguments given (not None) win over ``TOOLMETER_*`` variables, which win over defaults."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if overrides.get(f.name) is not None:
                values[f.name] = overrides[f.name]
                continue
            env_name = ENV_PREFIX + f.name.upper()
            text = os.environ.get(env_name)
            if text is None or text == "":
                continue
            values[f.name] = _parse(env_name, text, f.default)
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return cls(**values)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|kib|mib|gib)?\s*$", re.IGNORECASE)
_UNITS = {None: 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(env_name: str, text: str) -> int:
    """A size in bytes: ``67108864``, ``64MiB``, ``64MB`` (10**6), ``1.5GiB``.

    Raises:
        ConfigError: naming the variable, its value and what is expected.
    """
    m = _SIZE.match(text)
    if not m or float(m.group(1)) * _UNITS[(m.group(2) or "").lower() or None] < 1:
        raise ConfigError(
            f"{env_name}={text!r} is not a size; write bytes (67108864) or a number with KB, MB, GB, KiB, MiB or GiB"
        )
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower() or None])


def env_bytes(env_name: str, default: int) -> int:
    """The size in ``env_name`` (see :func:`parse_bytes`), or ``default`` when it is unset or empty."""
    text = os.environ.get(env_name)
    return parse_bytes(env_name, text) if text else default


def _parse(env_name: str, text: str, default: Any) -> Any:
    if env_name.endswith("_BYTES") and isinstance(default, int) and not isinstance(default, bool):
        return parse_bytes(env_name, text)
    try:
        if isinstance(default, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = "true or false" if isinstance(default, bool) else type(default).__name__
        raise ConfigError(f"{env_name}={text!r} is not valid; expected {kind}") from None
    return text
