"""A stand-in for `vllm serve` for the supervision unit test (test_vllm_supervision.py):
the admin routes swarmrl calls, answered from memory; no model. Run as
`python tests/stub_vllm.py serve MODEL --port P ...` (vLLM's argument order)."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CALLS: list[str] = []


class Handler(BaseHTTPRequestHandler):
    def _send(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?")[0]
        answers = {
            "/health": {},
            "/v1/models": {"data": [{"id": "stub", "max_model_len": 64}]},
            "/version": {"version": "0.32.0"},
            "/server_info": {"vllm_config": {"model_config": {"logprobs_mode": "processed_logprobs"}}},
            "/calls": CALLS,
        }
        self._send(answers.get(path, {}))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        CALLS.append(f"{self.path} {body}".strip())
        self._send({"success": True} if self.path.startswith("/reset_prefix_cache") else {})

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    port = int(sys.argv[sys.argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
