"""Query: named, bound queries over the store shared by the CLI and the dashboard."""
