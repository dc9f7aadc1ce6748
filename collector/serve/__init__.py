"""Serve: the OTLP receiver (HTTP and gRPC) and its durable spool."""
