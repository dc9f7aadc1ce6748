"""Store: the DuckDB file and DuckLake backends, their schema, payloads, extensions and maintenance."""
