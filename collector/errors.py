"""Errors toolmeter raises to its callers.

::

    ToolmeterError
     ├── ConfigError     a setting has a bad value (names the setting and what is allowed)
     ├── StoreError      the DuckDB store cannot be opened, read or written
     │    └── RejectedRows  the store refused a batch's rows (writing them again fails the same way)
     └── InputError      a trace file or span cannot be read (names the file, span and field)

Nothing here is ever raised into an agent's span-ending thread: the processor catches
and counts instead.
"""

from __future__ import annotations


class ToolmeterError(Exception):
    """Base class of every error toolmeter raises on purpose."""


class ConfigError(ToolmeterError, ValueError):
    """A configuration value is invalid."""


class StoreError(ToolmeterError):
    """The DuckDB store cannot be used."""


class RejectedRows(StoreError):
    """The store refused a batch's rows: a value it cannot hold (a missing key, a number out of
    range). Unlike a held file or a full disk, writing the same rows again fails the same way,
    so a writer sets the batch aside (counted and said) instead of retrying it."""


class InputError(ToolmeterError, ValueError):
    """Input (a trace file, a span, an attribute) cannot be read."""
