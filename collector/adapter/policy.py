"""A tool's bounding policy and the scope a handle belongs to."""

from __future__ import annotations

from dataclasses import dataclass

from collector.errors import ConfigError

SHAPES = ("list", "record", "document", "diagnostic")
STRATEGIES = ("head", "tail", "head_tail", "relevant")

MIN_BUDGET_TOKENS = 64
"""The smallest budget a policy takes: below it even the envelope's own fields (total, handle,
how to get the rest) would not fit, and a view over its budget is the one thing never shown."""


@dataclass(frozen=True)
class Policy:
    """How one tool's results are bounded before the model sees them.

    Args:
        budget_tokens: the most the view may cost, in exact tokens of the collector's counter.
        shape: ``list``, ``record``, ``document`` or ``diagnostic``.
        fields: for lists, the fields each item keeps; for records, the fields kept (None: all).
        sort_key: for lists, the field the items are ordered by (a stable sort: ties keep the
            tool's order), so that pages behind a handle never overlap or skip.
        descending: sort newest or largest first.
        max_items: for lists, the most items shown whatever the budget.
        items_key: for a list inside an object (``{"orders": [...]}``), the key holding it;
            found by itself when omitted (the first list-valued key).
        strategy: for documents: ``head``, ``tail``, ``head_tail`` (default) or ``relevant``
            (the parts that mention ``query``, passed to :func:`collector.adapter.shape`).
    """

    budget_tokens: int
    shape: str = "list"
    fields: tuple[str, ...] | None = None
    sort_key: str | None = None
    descending: bool = False
    max_items: int | None = None
    items_key: str | None = None
    strategy: str = "head_tail"

    def __post_init__(self) -> None:
        budget = self.budget_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_BUDGET_TOKENS:
            raise ConfigError(
                f"Policy.budget_tokens={budget!r} must be an integer of at least {MIN_BUDGET_TOKENS} "
                "(the envelope's total, handle and guidance must fit)"
            )
        if self.shape not in SHAPES:
            raise ConfigError(f"Policy.shape={self.shape!r} must be one of {', '.join(SHAPES)}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"Policy.strategy={self.strategy!r} must be one of {', '.join(STRATEGIES)}")
        if self.max_items is not None and (isinstance(self.max_items, bool) or self.max_items < 0):
            raise ConfigError(f"Policy.max_items={self.max_items!r} must be a non-negative integer or None")
        if self.fields is not None:
            if isinstance(self.fields, str) or not all(isinstance(f, str) for f in self.fields):
                raise ConfigError(f"Policy.fields={self.fields!r} must be a tuple of field names")
            object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True)
class Scope:
    """Who may read a handle: the run that made it and the principal it ran for.

    A handle is data, not a capability: one redeemed by another run or user (a prompt
    injection asking for it, say) is refused.
    """

    run_id: str
    principal: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ConfigError(f"Scope.run_id={self.run_id!r} must be a non-empty string (the agent run's id)")
        if not isinstance(self.principal, str):
            raise ConfigError(f"Scope.principal={self.principal!r} must be a string (the user the run acts for)")
