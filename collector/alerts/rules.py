"""Alert rules: thresholds per tool, from a TOML file.

::

    [defaults]
    p99_view_ratio = 1.5        # alert when p99 view tokens grow by this factor or more
    over_budget_points = 10     # ... or the over-budget rate rises by this many points
    min_calls = 20              # on each side of the change, or no verdict (noise)
    window_days = 7             # compare this many days before and after a change

    [tools.search_orders]
    p99_view_ratio = 2.0

Optional thresholds (off unless set): ``p99_raw_ratio``, ``truncated_points``,
``window_cost_ratio`` (window cost per call). Errors name the file, line and key.

Run size (:mod:`collector.alerts.runs`): ``p99_run_ratio`` and ``p50_run_ratio`` (default 1.5
each) on the tool-result tokens per run of each service, ``min_calls`` counting runs;
``[services.NAME]`` sets them for one service.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.errors import ConfigError


class RulesError(ConfigError):
    """The rules file is wrong; the message names the line and the key."""


@dataclass(frozen=True)
class Rule:
    """Thresholds for one tool."""

    p99_view_ratio: float | None = 1.5
    over_budget_points: float | None = 10.0
    p99_raw_ratio: float | None = None
    truncated_points: float | None = None
    window_cost_ratio: float | None = None
    p99_run_ratio: float | None = 1.5
    p50_run_ratio: float | None = 1.5
    min_calls: int = 20
    window_days: int = 7


@dataclass(frozen=True)
class Rules:
    """Default thresholds and per-tool overrides."""

    defaults: Rule = field(default_factory=Rule)
    tools: dict[str, Rule] = field(default_factory=dict)
    services: dict[str, Rule] = field(default_factory=dict)

    def for_tool(self, tool: str) -> Rule:
        return self.tools.get(tool, self.defaults)

    def for_service(self, service: str) -> Rule:
        return self.services.get(service, self.defaults)


_FIELDS = {f.name: f for f in dataclasses.fields(Rule)}


def _line_of(text: str, section: str | None, key: str) -> int | None:
    lines = text.splitlines()
    start = 0
    if section is not None:
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(re.escape(p) for p in section.split(".")) + r"\s*\]")
        for i, line in enumerate(lines):
            if header.match(line):
                start = i + 1
                break
    pattern = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i in range(start, len(lines)):
        if i > start and lines[i].lstrip().startswith("["):
            break
        if pattern.match(lines[i]):
            return i + 1
    return None


def _rule(values: Any, base: Rule, where: str, source: str, text: str) -> Rule:
    if not isinstance(values, dict):
        raise RulesError(f"{source}: [{where}] must be a table of thresholds")
    changes: dict[str, Any] = {}
    for key, value in values.items():
        line = _line_of(text, where, key)
        at = f"{source}:{line}" if line else source
        if key not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise RulesError(f"{at}: unknown key {key!r} in [{where}]; known keys: {known}")
        if key in ("min_calls", "window_days"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RulesError(f"{at}: {key} in [{where}] must be a positive integer, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise RulesError(f"{at}: {key} in [{where}] must be a positive number, got {value!r}")
        changes[key] = value
    return dataclasses.replace(base, **changes)


def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """Parse rules from TOML text.

    Raises:
        RulesError: with the line and the key that is wrong.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RulesError(f"{source}: not valid TOML ({e})") from e
    unknown = set(doc) - {"defaults", "tools", "services"}
    if unknown:
        key = sorted(unknown)[0]
        line = _line_of(text, None, key) or _line_of(text, key, "") or None
        raise RulesError(
            f"{source}{':' + str(line) if line else ''}: unknown section or key {key!r}; use [defaults], [tools.NAME] and [services.NAME]"
        )
    defaults = _rule(doc.get("defaults", {}), Rule(), "defaults", source, text)
    tools = {}
    for name, values in (doc.get("tools") or {}).items():
        tools[name] = _rule(values, defaults, f"tools.{name}", source, text)
    services = {name: _rule(values, defaults, f"services.{name}", source, text)
                for name, values in (doc.get("services") or {}).items()}  # fmt: skip
    return Rules(defaults=defaults, tools=tools, services=services)


def load_rules(path: str | Path | None) -> Rules:
    """Rules from a TOML file, or the defaults when ``path`` is None."""
    if path is None:
        return Rules()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise RulesError(f"{path}: cannot read the rules file ({e.strerror})") from e
    return parse_rules(text, str(path))
