"""``skyrl-rewards judge-server``: a rule-based stand-in for a judge model, to try judge configs.

It serves the two routes of an OpenAI-compatible server that a judge config
uses, on loopback by default:

- ``POST /v1/chat/completions``: a chat-completions reply whose text is the
  verdict, with ``usage`` (prompt and completion sizes in words);
- ``GET /v1/models``: one model, whatever ``--model`` names; a request for
  any model is answered (the reply names the model asked for).

It is not a model and judges nothing it cannot read. It reads the question
of the two built-in templates (:mod:`~skyrl_rewards.rewards.models.judge_prompts`):

- ``vlm_r1_llm`` (``Student's response: ...`` / ``Correct solution: ...``):
  ``1.0`` when the answers match, else ``0.0``;
- ``score_0_10`` (``Reference answer: ...`` / ``Student's answer: ...``):
  ``10`` or ``0``.

Two answers *match* (:func:`answers_match`) when they are the same text
after the project's ``clean`` (the answer span, case, spacing, a trailing
dot), the same number, or when the reference's words appear in the
student's answer as whole words. Any other prompt is answered with HTTP 400
naming the templates it reads: the row is masked with that cause, as with a
real endpoint's error.

Use it to see a judge config work end to end on a machine without a GPU
(``docs/usage.md``, "Trying a judge without a GPU"); for training, serve a
real model (``vllm serve``, docs/judges.md).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skyrl_rewards.rewards.contract.text import clean

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
"""The port ``configs/vqa_judge.yaml`` points at."""
DEFAULT_MODEL = "skyrl-rewards-rule-judge"
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest request body read (a judge prompt with images stays far below)."""

_TEMPLATES = (
    # (template, its fields: the student's answer (model text: matched greedily, so a line it
    # holds cannot pose as the solution) and the reference, the verdicts for a match and not)
    (
        "vlm_r1_llm",
        re.compile(
            r"Student's response: (?P<student>.*)\nCorrect solution: (?P<gold>.*?)"
            r"\nOutput only 1\.0 or 0\.0:",
            re.S,
        ),
        ("1.0", "0.0"),
    ),
    (
        "score_0_10",
        re.compile(
            r"Reference answer: (?P<gold>.*?)\nStudent's answer: (?P<student>.*)\nScore \(0-10\):",
            re.S,
        ),
        ("10", "0"),
    ),
)


class UnreadablePrompt(ValueError):
    """The prompt is none of the templates the stand-in reads."""


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def answers_match(student: str, gold: str) -> bool:
    """The stand-in's rule: same cleaned text, same number, or the reference's words inside.

    >>> answers_match("The Cat.", "cat"), answers_match("0.50", "0.5")
    (True, True)
    >>> answers_match("a red car", "red car"), answers_match("dog", "cat"), answers_match("", "1")
    (True, False, False)
    """
    student_clean, gold_clean = clean(student), clean(gold)
    if not student_clean or not gold_clean:
        return False
    if student_clean == gold_clean:
        return True
    student_number, gold_number = _number(student_clean), _number(gold_clean)
    if student_number is not None and gold_number is not None:
        return student_number == gold_number
    if gold_number is not None:  # a number is matched by value only: "12" is not inside "2012"
        return False
    return re.search(rf"(?<!\w){re.escape(gold_clean)}(?!\w)", student_clean) is not None


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list (images left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text" and "text" in part
        )
    return ""


def verdict(messages: Any) -> str:
    """The verdict text for a chat's ``messages``; :class:`UnreadablePrompt` when none applies.

    >>> verdict([{"role": "user", "content": "Student's response: 4\\nCorrect solution: 4.0\\n"
    ...     "Output only 1.0 or 0.0:"}])
    '1.0'
    """
    if not isinstance(messages, list):
        raise UnreadablePrompt("messages: expected a list of chat messages")
    text = "\n".join(_text(m.get("content")) for m in messages if isinstance(m, Mapping))
    for _name, pattern, (yes, no) in _TEMPLATES:
        found = pattern.search(text)
        if found is not None:
            return yes if answers_match(found["student"], found["gold"]) else no
    names = ", ".join(name for name, _, _ in _TEMPLATES)
    raise UnreadablePrompt(
        f"the local rule-based judge reads only the built-in templates ({names}); this prompt "
        "is none of them. Use one of them (judge.template), or serve a real model"
    )


def chat_reply(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The chat-completions reply to ``body`` (:class:`UnreadablePrompt` when unreadable)."""
    messages = body.get("messages")
    answer = verdict(messages)
    words = sum(len(_text(m.get("content")).split()) for m in messages if isinstance(m, Mapping))
    return {
        "id": f"chatcmpl-local-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": words, "completion_tokens": 1, "total_tokens": words + 1},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a pool's judge lane opens many connections at once


def send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: Any,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer ``handler``'s request with ``payload`` as JSON, ``status`` and any extra ``headers``."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _handler(model: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the judge client expects

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
            """Quiet: a scoring run sends a request per judged row."""

        def _send(self, status: int, payload: Mapping[str, Any]) -> None:
            send_json(self, status, payload)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") != "/v1/models":
                self._error(404, f"no route GET {self.path}; this server has /v1/models")
                return
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": model, "object": "model", "owned_by": "skyrl-rewards"}],
                },
            )

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._error(404, f"no route POST {self.path}; this server has /v1/chat/completions")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                self._error(413, f"request body of {length} bytes; at most {MAX_BODY_BYTES}")
                return
            try:
                body = json.loads(self.rfile.read(length))
                if not isinstance(body, dict):
                    raise UnreadablePrompt("the body is JSON but not an object")
                self._send(200, chat_reply(body, model))
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                self._error(400, f"the body is not JSON: {error}")
            except UnreadablePrompt as error:
                self._error(400, str(error))

    return Handler


def make_server(
    host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, model: str = DEFAULT_MODEL
) -> ThreadingHTTPServer:
    """The server, bound and listening (``port=0``: a free port); run ``serve_forever()`` on it.

    Raises ``OSError`` naming the address and the fix when it cannot listen there.
    """
    try:
        return _Server((host, port), _handler(model))
    except OSError as error:
        raise OSError(
            f"--port: cannot listen on {host}:{port} ({error.strerror or error}); pick another "
            "port with --port and set the config's judge endpoint base_url to match"
        ) from error


def base_url(server: ThreadingHTTPServer) -> str:
    """``http://HOST:PORT/v1``: what a judge config's ``endpoint.base_url`` takes."""
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/v1"
