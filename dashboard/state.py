"""Settings shared by the pages."""

CACHE_TTL_S = 10
"""Query results are cached this long: fresh enough to watch a collector write."""
