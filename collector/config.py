"""Configuration: every ``TOOLMETER_*`` variable is named, documented and parsed here.

Precedence is argument > environment > default. :class:`CollectorConfig` holds the
settings of the measuring pipeline; the other variables are read through the functions
below, each validated where it is read, with an error that names the variable and value.
Nothing here writes to the environment: toolmeter runs inside the observed agent.

=================================  ================================================  ======================
variable                           meaning                                           default
=================================  ================================================  ======================
``TOOLMETER_DB``                   the store: a DuckDB file or ``ducklake:...``      ``toolmeter.duckdb``
``TOOLMETER_ENCODING``             tiktoken encoding for counts                      ``o200k_base``
``TOOLMETER_COUNTER``              ``auto``, ``quicktok`` or ``tiktoken`` counts     ``auto``
``TOOLMETER_STORE_PAYLOADS``       keep payloads for replay (``false``: numbers)     ``true``
``TOOLMETER_PAYLOAD_CAP_BYTES``    larger payloads keep head and tail only           ``1MiB``
``TOOLMETER_MAX_QUEUE_SIZE``       spans waiting for the worker, at most             ``4096``
``TOOLMETER_MAX_QUEUED_BYTES``     text of the spans waiting, at most                ``256MiB``
``TOOLMETER_MAX_BATCH_SIZE``       spans measured and written per batch              ``512``
``TOOLMETER_FLUSH_INTERVAL``       seconds between writes                            ``1.0``
``TOOLMETER_RECEIVER_TOKEN``       bearer token ``toolmeter serve`` requires         none
``TOOLMETER_MAX_BODY_BYTES``       largest OTLP request ``serve`` accepts            ``64MiB``
``TOOLMETER_WEBHOOK_URL``          where ``serve`` and ``watch`` POST new alerts     none
``TOOLMETER_DATA_PATH``            where a new DuckLake keeps its Parquet files      next to the catalog
``TOOLMETER_STATE_DIR``            this host's state: extensions, a lake's spool     ``.toolmeter``
``TOOLMETER_REDACT``               ``off``: store payloads without masking secrets   on
``TOOLMETER_REDACT_PATTERNS``      extra secret patterns, JSON ``{"name": regex}``   none
``TOOLMETER_RETAIN``               rows kept this long (``serve``, ``prune``)        ``30d``
``TOOLMETER_RETAIN_PAYLOADS``      payloads kept this long                           ``7d``
``TOOLMETER_MAX_STORE_BYTES``      prune the oldest beyond this size                 none
``TOOLMETER_MEASURE_PROCESSES``    processes ``serve`` measures large batches in     cores, at most 4
``TOOLMETER_RELAY_ENDPOINT``       set by the processor for its forwarding helper    (internal)
``TOOLMETER_RELAY_TOKEN``          the same helper's bearer token                    (internal)
``TOOLMETER_STRICT``               re-raise failures on the agent's thread (tests)   off
``TOOLMETER_PRICES``               a JSON price table for money figures (``cost``)   the shipped one
``TOOLMETER_DASHBOARD_URL``        where the dashboard is served: alerts link to it   none (no links)
``TOOLMETER_FORWARD_TO``           ``opentelemetry-instrument``: forward to this URL  none: write ``TOOLMETER_DB``
=================================  ================================================  ======================

Sizes take units: ``67108864``, ``64MiB``, ``64MB`` (10**6), ``1.5GiB``. Ages take ``d``, ``h``,
``m`` or ``s`` (``30d``, ``12h``), or ``forever``. When the queue is
full, new spans are dropped and counted (never raised into the agent); the count is stored
in ``collector_stats.dropped`` and shown by the dashboard.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Final

from collector.errors import ConfigError

ENV_PREFIX: Final = "TOOLMETER_"

ENCODINGS: Final = ("o200k_base", "cl100k_base")
"""The tiktoken encodings toolmeter counts with (their files ship in the ``bpe-openai`` wheel)."""
DEFAULT_ENCODING: Final = "o200k_base"

COUNTERS: Final = ("auto", "quicktok", "tiktoken")
"""Who counts: ``auto`` is quicktok when installed and self-checked, else tiktoken (``collector.measure.tokens``)."""

DEFAULT_DB: Final = "toolmeter.duckdb"
"""The store when neither ``--db``/``db=`` nor ``TOOLMETER_DB`` names one."""
DEFAULT_DEMO_DB: Final = "toolmeter-demo.duckdb"
"""The store ``toolmeter demo`` builds (kept apart from a real store)."""

DB_ENV: Final = "TOOLMETER_DB"
RECEIVER_TOKEN_ENV: Final = "TOOLMETER_RECEIVER_TOKEN"
"""Bearer token every request to ``toolmeter serve`` must carry (``Authorization: Bearer <token>``)."""
MAX_BODY_BYTES_ENV: Final = "TOOLMETER_MAX_BODY_BYTES"
"""Largest OTLP request body ``toolmeter serve`` accepts (after gzip); larger ones get 413."""
DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024
WEBHOOK_URL_ENV: Final = "TOOLMETER_WEBHOOK_URL"
"""Where ``serve`` and ``watch`` POST alerts as they open."""
DATA_PATH_ENV: Final = "TOOLMETER_DATA_PATH"
"""Where a new DuckLake keeps its Parquet files: a shared folder or ``s3://...``."""
STATE_DIR_ENV: Final = "TOOLMETER_STATE_DIR"
"""This host's own state: DuckDB extensions, a lake receiver's spool."""
DEFAULT_STATE_DIR: Final = ".toolmeter"
REDACT_ENV: Final = "TOOLMETER_REDACT"
"""``off`` stores payloads as they are; anything else masks secrets before they are stored."""
REDACT_PATTERNS_ENV: Final = "TOOLMETER_REDACT_PATTERNS"
"""Extra secret patterns: a JSON object of name -> regular expression."""
STRICT_ENV: Final = "TOOLMETER_STRICT"
"""Re-raise failures on the agent's thread instead of logging them (toolmeter's tests; never in production)."""


MEASURE_PROCESSES_ENV: Final = "TOOLMETER_MEASURE_PROCESSES"
RELAY_ENDPOINT_ENV: Final = "TOOLMETER_RELAY_ENDPOINT"
"""Where the forwarding helper sends (set by the processor in the helper's environment only)."""
RELAY_TOKEN_ENV: Final = "TOOLMETER_RELAY_TOKEN"
"""The helper's bearer token: in its environment, not on its command line that ``ps`` shows."""
DASHBOARD_URL_ENV: Final = "TOOLMETER_DASHBOARD_URL"
"""The dashboard's address as people reach it (``https://toolmeter.internal``): webhook alerts carry links there."""
FORWARD_TO_ENV: Final = "TOOLMETER_FORWARD_TO"
"""Where the ``toolmeter`` span exporter (``OTEL_TRACES_EXPORTER=toolmeter``) forwards; unset, it
measures in the process and writes ``TOOLMETER_DB``."""
PRICES_ENV: Final = "TOOLMETER_PRICES"
"""A JSON file of model prices (:mod:`collector.query.prices`) replacing the shipped table."""
RETAIN_ENV: Final = "TOOLMETER_RETAIN"
RETAIN_PAYLOADS_ENV: Final = "TOOLMETER_RETAIN_PAYLOADS"
MAX_STORE_BYTES_ENV: Final = "TOOLMETER_MAX_STORE_BYTES"
DEFAULT_RETAIN: Final = timedelta(days=30)
DEFAULT_RETAIN_PAYLOADS: Final = timedelta(days=7)


def env_text(env_name: str, given: str | None = None) -> str | None:
    """``given`` when it is not None, else the variable, else None (empty counts as unset)."""
    if given is not None:
        return given
    return os.environ.get(env_name) or None


def store_path(given: str | None = None) -> str:
    """The store named by an argument, else ``TOOLMETER_DB``, else :data:`DEFAULT_DB`."""
    return env_text(DB_ENV, given) or DEFAULT_DB


def receiver_token(given: str | None = None) -> str | None:
    return env_text(RECEIVER_TOKEN_ENV, given)


def dashboard_url(given: str | None = None) -> str | None:
    return env_text(DASHBOARD_URL_ENV, given)


def forward_to(given: str | None = None) -> str | None:
    return env_text(FORWARD_TO_ENV, given)


def max_body_bytes(given: int | None = None) -> int:
    return given if given else env_bytes(MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES)


def measure_processes(given: int | None = None) -> int:
    """Processes ``serve`` measures large batches in: the argument, else the variable, else one
    per core (at most 4); 1 measures on the receiver's own threads."""
    if given is not None:
        value = given
    elif text := env_text(MEASURE_PROCESSES_ENV):
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{MEASURE_PROCESSES_ENV}={text!r} is not a whole number of processes") from None
    else:
        return min(os.cpu_count() or 1, 4)
    if value < 1:
        raise ConfigError(f"{MEASURE_PROCESSES_ENV if given is None else '--measure-processes'} must be at least 1 "
                          f"(1: measure on the receiver's threads), not {value}")  # fmt: skip
    return value


def webhook_url(given: str | None = None) -> str | None:
    return env_text(WEBHOOK_URL_ENV, given)


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhms])\s*$", re.IGNORECASE)


def parse_age(name: str, text: str) -> timedelta | None:
    """``30d``, ``12h``, ``90m``, ``3600s``, or ``forever`` (None: never removed).

    Raises:
        ConfigError: naming the setting, its value and what is expected.
    """
    if text.strip().lower() in ("forever", "never", "off"):
        return None
    m = _AGE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"{name}={text!r} is not an age; write 30d, 12h, 90m, 3600s or forever")
    return timedelta(seconds=float(m.group(1)) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[m.group(2).lower()])


def retention(
    rows: str | None = None, payloads: str | None = None, max_store_bytes: str | None = None
) -> tuple[timedelta | None, timedelta | None, int | None]:
    """How long rows and payloads are kept and the store's size cap: arguments, else
    ``TOOLMETER_RETAIN``, ``TOOLMETER_RETAIN_PAYLOADS``, ``TOOLMETER_MAX_STORE_BYTES``, else defaults."""
    rows_text, payloads_text = env_text(RETAIN_ENV, rows), env_text(RETAIN_PAYLOADS_ENV, payloads)
    cap_text = env_text(MAX_STORE_BYTES_ENV, max_store_bytes)
    return (
        parse_age("--retain" if rows else RETAIN_ENV, rows_text) if rows_text else DEFAULT_RETAIN,
        parse_age("--retain-payloads" if payloads else RETAIN_PAYLOADS_ENV, payloads_text)
        if payloads_text else DEFAULT_RETAIN_PAYLOADS,
        parse_bytes("--max-size" if max_store_bytes else MAX_STORE_BYTES_ENV, cap_text) if cap_text else None,
    )  # fmt: skip


def strict() -> bool:
    """Read at each use, not at import: a test may set it after toolmeter is imported."""
    return (os.environ.get(STRICT_ENV) or "").lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class CollectorConfig:
    """Resolved collector settings. Build with :meth:`resolve` to apply the environment."""

    db: str = DEFAULT_DB
    encoding: str = DEFAULT_ENCODING
    counter: str = "auto"
    store_payloads: bool = True
    payload_cap_bytes: int = 1024 * 1024
    max_queue_size: int = 4096
    max_queued_bytes: int = 256 * 1024 * 1024
    max_batch_size: int = 512
    flush_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ConfigError(f"encoding={self.encoding!r} is not supported; use one of {', '.join(ENCODINGS)}")
        if self.counter not in COUNTERS:
            raise ConfigError(f"counter={self.counter!r} is not supported; use one of {', '.join(COUNTERS)}")
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
