"""A real OpenAI-compatible embeddings endpoint on loopback, for banking_knowledge's tests and bench.

:class:`EmbeddingsServer` answers ``POST /v1/embeddings`` in OpenAI's shape
(``{"object": "list", "data": [{"object", "index", "embedding"}], "model",
"usage"}``; ``encoding_format: base64`` as the OpenAI SDK asks by default:
little-endian float32). Each text's vector counts its words in 256 hashed
buckets, so texts that share words are similar. ``down``: every call is
answered 503 (an outage) until set back. ``calls`` and ``texts`` count what
reached it. The HTTP plumbing is ``tests/models/loopback_server.py``'s (put
``tests/models`` on ``sys.path`` before importing this module).
"""

from __future__ import annotations

import base64
import re
import struct
import zlib
from typing import Any

from loopback_server import LoopbackHandler, LoopbackServer

DIMENSIONS = 256


def bag_of_words(text: str) -> list[float]:
    """The word counts of ``text`` in :data:`DIMENSIONS` hashed buckets."""
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[zlib.crc32(word.encode()) % DIMENSIONS] += 1.0
    return vector


class EmbeddingsServer(LoopbackServer):
    """The endpoint, served on a thread while the ``with`` block runs; ``url`` is its ``.../v1``."""

    def __init__(self) -> None:
        server = self

        class Handler(LoopbackHandler):
            owner = server

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = self.read_json()
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with server._lock:
                    server.calls += 1
                    server.texts += len(texts)
                if server.down or self.path != "/v1/embeddings":
                    self.send(503, {"error": {"message": "embeddings are down"}})
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
                self.send(200, reply)

        super().__init__(Handler)
        self.down = False
        self.calls = 0
        self.texts = 0
