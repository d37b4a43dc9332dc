"""``tau-bench-env eval --stand-in``: a scripted agent and user, to see an eval run end to end.

An eval needs an agent model and a user model behind two servers. To try
the command without them, ``--stand-in`` plays both:

- the agent: :class:`StandInAgent`, an OpenAI-compatible chat endpoint on
  loopback (``POST /v1/chat/completions``, ``GET /v1/models``, on a free
  port) that answers each episode with its task's ground-truth actions, one
  tool call per turn (``tool_calls``, as a served model in native tool mode
  replies), then one message holding the task's required outputs;
- the user: the project's replay user (``user.kind: replay``), whose one
  turn opens the conversation with the task's instruction and names the task
  (:func:`opening_turn`); when the agent has answered it ends the episode.

It is announced as a stand-in and judges nothing: the episodes replay the
answers, so each should pay 1.0 (a task whose ground truth needs the user to
act, tau2's dual control, cannot be replayed by the agent alone). The
eval's own machinery (the env, the tools, the reward, the journal, pass^k,
the summary) runs as it does for a model.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tau_bench_env.data_model.tasks import Task

MODEL = "tau-bench-env-stand-in"
MAX_BODY_BYTES = 16 * 1024 * 1024
_OPENING = re.compile(r"^\[stand-in user of task (?P<task>[^\]]+)\] ")


def opening_turn(task: Task) -> str:
    """The replay user's one turn: the task named for the stand-in agent, then its instruction."""
    return f"[stand-in user of task {task.task_id}] {task.instruction}"


def _script(task: Task) -> list[dict[str, Any]]:
    """The agent's tool calls: the task's ground-truth actions that the agent performs."""
    return [
        {"name": action.name, "arguments": dict(action.kwargs)}
        for index, action in enumerate(task.actions)
        if action.name != "respond" and task.requestor(index) == "assistant"
    ]


def _closing(task: Task) -> str:
    outputs = ", ".join(task.outputs)
    return "Done: every step of your request is carried out." + (
        f" The answer: {outputs}." if outputs else ""
    )


class StandInAgent:
    """The scripted agent's replies, by task (see the module docstring)."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self._tasks = {task.task_id: task for task in tasks}

    def reply(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The assistant message for a conversation: the next scripted call, or the closing."""
        task = self._task(messages)
        done = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        script = _script(task)
        if done < len(script):
            call = script[done]
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{done}",
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call["arguments"], ensure_ascii=False),
                        },
                    }
                ],
            }
        return {"role": "assistant", "content": _closing(task)}

    def _task(self, messages: Sequence[Mapping[str, Any]]) -> Task:
        for message in messages:
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, str):
                found = _OPENING.match(content)
                if found and found["task"] in self._tasks:
                    return self._tasks[found["task"]]
        raise ValueError(
            "the stand-in agent plays only conversations opened by its stand-in user "
            "('[stand-in user of task ID] ...')"
        )


def _handler(agent: StandInAgent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            """Quiet: the eval's own progress bar says what happens."""

        def _send(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._send(413, {"error": {"message": "request too large"}})
                return
            try:
                body = json.loads(self.rfile.read(length))
                message = agent.reply(body["messages"])
            except (ValueError, KeyError, TypeError) as error:
                self._send(400, {"error": {"message": str(error)}})
                return
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            self._send(
                200,
                {
                    "id": f"standin-{time.monotonic_ns()}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", MODEL),
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                },
            )

    return Handler


@contextmanager
def serving(tasks: Sequence[Task], host: str = "127.0.0.1") -> Iterator[str]:
    """Serve the stand-in agent for ``tasks`` on a free port of ``host``; yields its base URL."""
    server = ThreadingHTTPServer((host, 0), _handler(StandInAgent(tasks)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="stand-in-agent", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def announcement(base_url: str, tasks: int) -> str:
    """The line ``eval --stand-in`` prints first: what plays the agent and the user."""
    return (
        f"tau-bench-env eval: stand-in agent and user (no model): a scripted agent at {base_url} "
        f"replays each of the {tasks} tasks' ground-truth actions and a replay user opens each "
        "task; every episode should pay 1.0. This shows a run end to end and measures nothing: "
        "for a real eval pass --agent-base-url/--agent-model and a user (--user-base-url "
        "--user-model, or --user-kind replay --user-turns FILE)"
    )
