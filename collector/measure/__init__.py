"""Measure: tokens, bytes, retained ranges, shape and schema of a tool call's raw result and view."""
