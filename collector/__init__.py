"""toolmeter's collector: measure what each tool call puts into an agent's context window.

Two lines in an agent::

    from collector import ToolResultProcessor
    provider.add_span_processor(ToolResultProcessor(db="toolmeter.duckdb"))
"""

from collector.agent.processor import ToolResultProcessor
from collector.agent.record import ToolResult, measured_tool, record_tool_result
from collector.config import CollectorConfig
from collector.errors import ConfigError, InputError, StoreError, ToolmeterError

__version__ = "0.1.0"

__all__ = [
    "CollectorConfig",
    "ConfigError",
    "InputError",
    "StoreError",
    "ToolResult",
    "ToolResultProcessor",
    "ToolmeterError",
    "__version__",
    "measured_tool",
    "record_tool_result",
]
