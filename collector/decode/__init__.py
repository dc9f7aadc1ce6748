"""Decode: OTLP request bodies and trace files into plain span and log records."""
