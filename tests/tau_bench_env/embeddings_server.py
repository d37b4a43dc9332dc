"""A real OpenAI-compatible embeddings endpoint on loopback, for banking_knowledge's tests and bench.

:class:`EmbeddingsServer` answers ``POST /v1/embeddings`` in OpenAI's shape
(``{"object": "list", "data": [{"object", "index", "embedding"}], "model",
"usage"}``; ``encoding_format: base64`` as the OpenAI SDK asks by default:
little-endian float32). Each text's vector counts its words in 256 hashed
buckets, so texts that share words are similar. ``down``: every call is
answered 503 (an outage) until set back. ``calls`` and ``texts`` count what
reached it.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skyrl_rewards.cli.judge_server import send_json

DIMENSIONS = 256


def bag_of_words(text: str) -> list[float]:
    """The word counts of ``text`` in :data:`DIMENSIONS` hashed buckets."""
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[zlib.crc32(word.encode()) % DIMENSIONS] += 1.0
    return vector


class EmbeddingsServer:
    """The endpoint, served on a thread while the ``with`` block runs."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0
        self.texts = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with server._lock:
                    server.calls += 1
                    server.texts += len(texts)
                if server.down or self.path != "/v1/embeddings":
                    send_json(self, 503, {"error": {"message": "embeddings are down"}})
                    return
                packed = body.get("encoding_format") == "base64"
                data = []
                for index, text in enumerate(texts):
                    vector: Any = bag_of_words(text)
                    if packed:
                        raw = struct.pack(f"<{len(vector)}f", *vector)
                        vector = base64.b64encode(raw).decode()
                    data.append({"object": "embedding", "index": index, "embedding": vector})
                usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
                reply = {"object": "list", "data": data, "model": body["model"], "usage": usage}
                send_json(self, 200, reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The endpoint's base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
