"""A scripted Anthropic Messages API server on 127.0.0.1, with prompt caching and context editing.

The ``anthropic`` client talks to it as to the real API (``ANTHROPIC_BASE_URL``). The script:
while an offered tool has no ``tool_result`` in the messages, the model asks for the next one
(a ``tool_use`` block); then it answers with text. Usage is reported as Anthropic does, the
cached parts apart from ``input_tokens``: each request reads the previous request's whole
prompt from the cache and writes the rest. From the third request on, the response reports
that context editing cleared the oldest tool result (``context_management.applied_edits``).

Every request body, and the usage and edits reported for it, are kept for the test.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.frameworks.fake_openai import FINAL_ANSWER, TOOL_ARGUMENTS

SYSTEM_TOKENS = 300
"""What the fake counts for the system prompt and tool definitions of every request."""
CLEARED_FROM = 3
"""The first request (1-based) whose response reports a cleared tool result."""


def prompt_tokens(body: dict[str, Any]) -> int:
    return SYSTEM_TOKENS + len(json.dumps(body.get("messages") or [])) // 4


def _answered(messages: list[dict[str, Any]]) -> list[str]:
    names: dict[str, str] = {}
    done = []
    for m in messages:
        for block in m.get("content") if isinstance(m.get("content"), list) else []:
            if block.get("type") == "tool_use":
                names[block["id"]] = block["name"]
            elif block.get("type") == "tool_result":
                done.append(names.get(block.get("tool_use_id", ""), ""))
    return done


class FakeAnthropic:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, Any]] = []
        self.edits: list[dict[str, Any] | None] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def reply(self, body: dict[str, Any], n: int) -> dict[str, Any]:
        offered = [t["name"] for t in body.get("tools") or []]
        missing = [t for t in offered if t not in _answered(body.get("messages") or [])]
        total = prompt_tokens(body)
        previous = prompt_tokens(self.requests[-2]) if n > 1 else 0
        usage = {"input_tokens": 5, "cache_read_input_tokens": previous,
                 "cache_creation_input_tokens": total - previous - 5, "output_tokens": 20 + 10 * len(missing[:1])}  # fmt: skip
        if missing:
            name = missing[0]
            content = [{"type": "tool_use", "id": f"toolu_{n:02d}_{name}", "name": name,
                        "input": TOOL_ARGUMENTS.get(name, {})}]  # fmt: skip
        else:
            content = [{"type": "text", "text": FINAL_ANSWER}]
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": content, "stop_reason": "tool_use" if missing else "end_turn",
                   "stop_sequence": None, "usage": usage}  # fmt: skip
        edit = None
        if n >= CLEARED_FROM:
            edit = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 1,
                                       "cleared_input_tokens": 400}]}  # fmt: skip
            message["context_management"] = edit
        self.usages.append(usage)
        self.edits.append(edit)
        return message

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, payload: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self.path.split("?")[0].rstrip("/").endswith("/v1/messages"):
                    self._send(404, json.dumps({"type": "error", "error": {"message": f"{self.path}"}}).encode())
                    return
                with fake._lock:
                    fake.requests.append(body)
                    message = fake.reply(body, len(fake.requests))
                self._send(200, json.dumps(message).encode())

        return Handler
