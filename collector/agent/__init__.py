"""What runs inside the observed agent's process: the span processor, the tool-boundary helpers, forwarding."""
