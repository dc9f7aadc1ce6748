"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for framework tests.

Frameworks whose model is an OpenAI client (LangChain's ChatOpenAI, the OpenAI Agents SDK,
Strands, LiteLLM under ADK and CrewAI, LlamaIndex, the AI SDK's openai provider, a plain
``openai`` loop) talk to it as they would to the real API. The script is the same for all:

* while some tool offered in the request has no result in the messages yet, the model asks
  for tools: every missing one in one assistant message (``parallel``) or the next one alone;
* once every offered tool has a result, it answers with text.

Every request body is kept (``requests``), so a test can see what the model was shown.
Only the standard library: it runs in the test process.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOL_ARGUMENTS: dict[str, dict[str, Any]] = {
    "search_orders": {"status": "refunded"},
    "fetch_logs": {"pod": "checkout-7d9f"},
    "get_status": {"order_id": "A-10001"},
}
"""Arguments the model passes to each tool of the test agents (any other tool gets ``{}``)."""

FINAL_ANSWER = "Refunds are concentrated in eu-west; checkout-7d9f restarted twice; A-10001 shipped."


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            names.append(fn["name"])
        elif isinstance(tool, dict) and tool.get("name"):
            names.append(tool["name"])
    return names


def _answered(messages: list[dict[str, Any]]) -> set[str]:
    """Tool names whose calls have a tool-role result in the messages."""
    names_by_id: dict[str, str] = {}
    done: set[str] = set()
    for m in messages:
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            names_by_id[tc.get("id", "")] = fn.get("name", "")
        if m.get("role") == "tool":
            done.add(names_by_id.get(m.get("tool_call_id", ""), m.get("name", "")))
    return done


class FakeOpenAI:
    """Serve ``/v1/chat/completions`` (plain and streamed) and ``/v1/models`` until :meth:`stop`."""

    def __init__(self, parallel: bool = True, model: str = "gpt-4o-mini") -> None:
        self.parallel = parallel
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, Any]] = []
        """The usage reported for each chat completion, in order."""
        self._lock = threading.Lock()
        self._n = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The base URL a client takes (``.../v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if "messages" in r]

    # --- the script -----------------------------------------------------------------------

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for a request: tool calls, or the final text."""
        messages = body.get("messages") or []
        missing = [n for n in _tool_names(body) if n not in _answered(messages)]
        if not missing:
            return {"role": "assistant", "content": FINAL_ANSWER}
        calls = []
        with self._lock:
            for name in missing if self.parallel else missing[:1]:
                self._n += 1
                args = json.dumps(TOOL_ARGUMENTS.get(name, {}))
                calls.append({"id": f"call_{name}_{self._n}", "type": "function",
                              "function": {"name": name, "arguments": args}})  # fmt: skip
        return {"role": "assistant", "content": None, "tool_calls": calls}

    def _usage(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        prompt = len(json.dumps(messages)) // 4
        completion = len(json.dumps(message)) // 4
        # a request that answers tool calls repeats the conversation before them: half its prompt
        # is reported as read from the prompt cache, as OpenAI reports it (part of prompt_tokens)
        cached = prompt // 2 if any(m.get("role") == "tool" for m in messages) else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: bytes, content_type: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    data = {"object": "list", "data": [{"id": fake.model, "object": "model", "owned_by": "test"}]}
                    self._send(200, json.dumps(data).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._send(400, b'{"error": {"message": "bad json"}}')
                    return
                with fake._lock:
                    fake.requests.append(body)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, json.dumps({"error": {"message": f"{self.path} is not served"}}).encode())
                    return
                message = fake.reply(body)
                usage = fake._usage(body, message)
                with fake._lock:
                    fake.usages.append(usage)
                created = int(time.time())
                cid = f"chatcmpl-{len(fake.requests)}"
                model = body.get("model") or fake.model
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                if not body.get("stream"):
                    out = {"id": cid, "object": "chat.completion", "created": created, "model": model,
                           "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}  # fmt: skip
                    self._send(200, json.dumps(out).encode())
                    return
                chunks: list[dict[str, Any]] = []
                base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
                chunks.append({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                if message.get("content"):
                    chunks.append({**base, "choices": [{"index": 0, "delta": {"content": message["content"]}}]})
                for i, tc in enumerate(message.get("tool_calls") or []):
                    delta = {"tool_calls": [{"index": i, **tc}]}
                    chunks.append({**base, "choices": [{"index": 0, "delta": delta}]})
                chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    chunks.append({**base, "choices": [], "usage": usage})
                payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                self._send(200, payload, "text/event-stream")

        return Handler
