"""Local OpenAI-compatible servers for the eval tests and benchmark (127.0.0.1 only).

- :class:`AgentServer` plays a scripted agent: the ground truth of the task
  the user names (``oracle``), or one of a cycle of known mistakes
  (``mistakes``). It answers in native ``tool_calls`` or in ``<tool_call>``
  text, and can fail the requests of chosen tasks with HTTP 500.
- :class:`UserServer` plays the user: names the task (found from the
  instruction in its system prompt), then ends with ``###STOP###``. Offered
  tools (a domain with user tools, telecom), it first makes the task's
  user-side gold calls, all in one answer.

The agent learns the task from the user's first message ("... task <key>.")
and its episode number from a ``<think>episode N</think>`` tag in its own
earlier messages, so concurrent episodes of one task stay apart.
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

from skyrl_rewards.cli.judge_server import send_json
from tau_bench_env.backends.protocol import Domain
from tau_bench_env.data_model.tasks import RESPOND, Action, Task
from tau_bench_env.users.simulators import STOP

_TASK = re.compile(r"task (\S+)\.")
_EPISODE = re.compile(r"<think>episode (\d+)</think>")
HOLD_LIMIT_S = 120.0
"""Longest an answer waits while :attr:`AgentServer.answering` is cleared."""
MISTAKES = ("oracle", "drop_last_write", "malformed_then_no_outputs", "loop_until_truncated")
"""The scripted agent's cycle: episode n of a task plays MISTAKES[n % 4] (``mistakes`` mode)."""


def first_user_message(task: Task) -> str:
    """What the user says first: names the task for the scripted agent."""
    return f"Hello, I am calling about task {task.task_id}."


def user_turns(tasks: Sequence[Task]) -> dict[str, list[str]]:
    """Replay-user turns per task id (``EvalSpec.user_turns``)."""
    return {task.task_id: [first_user_message(task)] for task in tasks}


def closing_reply(task: Task) -> str:
    """A final reply naming every required output."""
    if task.outputs:
        return "To confirm: " + ", ".join(task.outputs) + ". Anything else?"
    return "Is there anything else I can help with?"


def plan(domain: Domain, task: Task, mistake: str) -> list[Action | str]:
    """The agent's turns for ``task``: its actions (the user's are the user's), then a
    closing reply; ``str`` = raw text."""
    actions: list[Action | str] = [
        a for i, a in enumerate(task.actions) if task.requestor(i) == "assistant"
    ]
    closing = Action(RESPOND, {"content": closing_reply(task)})
    if mistake == "drop_last_write":
        writes = [i for i, a in enumerate(actions) if a.name not in domain.read_only_tools]
        if writes:
            del actions[writes[-1]]
    elif mistake == "malformed_then_no_outputs":
        actions.insert(0, '<tool_call>{"name": "calculate", "arguments": {oops}</tool_call>')
        closing = Action(RESPOND, {"content": "All done. Anything else?"})
    elif mistake == "loop_until_truncated":
        return [Action("calculate", {"expression": "2 + 2"})] * 1000
    return [*actions, closing]


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


class ChatServer:
    """A ThreadingHTTPServer on 127.0.0.1 answering ``POST .../chat/completions``.

    HTTP/1.1 with keep-alive and without Nagle's delay, as vLLM's server (uvicorn)
    answers: a client keeps its connections (a server that closed each one would
    charge every request a new connection, which real endpoints do not); a listen
    backlog of 128 (``http.server``'s 5 drops the connections of 16 clients opened
    at once, and each dropped one waits a second to try again).
    """

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner._peer.port = self.client_address[1]
                status, payload = owner.answer(body)
                send_json(self, status, payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.requests = 0
        self._lock = threading.Lock()
        self._peer = threading.local()  # .port: the client's port of the request being answered
        self._http = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError

    @contextmanager
    def running(self) -> Iterator[ChatServer]:
        """Serve in a thread for the duration of the block."""
        self._thread.start()
        try:
            yield self
        finally:
            self._http.shutdown()
            self._http.server_close()


def _completion(message: dict[str, Any], prompt_tokens: int) -> dict[str, Any]:
    return {
        "id": "cmpl",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 7},
    }


class AgentServer(ChatServer):
    """The scripted agent (see the module docstring).

    ``fail_tasks``: task keys whose requests get HTTP 500 (change it between
    runs); ``delay_s``: a pause before each answer (for timeouts);
    ``answering``: cleared, answers wait until it is set again (at most
    :data:`HOLD_LIMIT_S`), so that no episode can end meanwhile; :attr:`held`
    names the requests waiting so.
    ``mistakes=False`` plays every episode as the oracle.
    """

    def __init__(self, domain: Domain, tasks: Sequence[Task], *, mistakes: bool = False) -> None:
        super().__init__()
        self._domain = domain
        self._tasks = {task.task_id: task for task in tasks}
        self._mistakes = mistakes
        self._episodes: dict[str, int] = {}
        self.fail_tasks: set[str] = set()
        self.delay_s = 0.0
        self.answering = threading.Event()
        self.answering.set()
        self._held: dict[int, str] = {}

    @property
    def held(self) -> dict[int, str]:
        """The requests waiting for :attr:`answering`: client port (127.0.0.1) -> task key."""
        with self._lock:
            return dict(self._held)

    @property
    def episodes_started(self) -> int:
        """Episodes whose first agent turn this server answered."""
        with self._lock:
            return sum(self._episodes.values())

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests += 1
        messages = body["messages"]
        named = (_TASK.search(m["content"] or "") for m in messages if m["role"] == "user")
        key = next(found for found in named if found).group(1)
        if key in self.fail_tasks:
            return 500, {"error": "scripted failure"}
        if self.delay_s:
            time.sleep(self.delay_s)
        port = self._peer.port
        with self._lock:
            self._held[port] = key
        try:
            if not self.answering.wait(timeout=HOLD_LIMIT_S):
                return 503, {"error": f"answers held for more than {HOLD_LIMIT_S} s"}
        finally:
            with self._lock:
                del self._held[port]
        task = self._tasks[key]
        mine = [m for m in messages if m["role"] == "assistant"]
        if mine:
            episode = int(_EPISODE.search(mine[0]["content"] or "").group(1))
        else:
            with self._lock:
                episode = self._episodes.get(key, 0)
                self._episodes[key] = episode + 1
        mistake = MISTAKES[episode % len(MISTAKES)] if self._mistakes else "oracle"
        turns = plan(self._domain, task, mistake)
        step = turns[min(len(mine), len(turns) - 1)]
        tag = f"<think>episode {episode}</think>"
        native = "tools" in body
        if isinstance(step, str):
            message: dict[str, Any] = {"role": "assistant", "content": tag + step}
        elif step.name == RESPOND:
            message = {"role": "assistant", "content": tag + step.kwargs["content"]}
        elif native:
            arguments = json.dumps(dict(step.kwargs))
            call = {"id": f"c{len(mine)}", "type": "function"}
            call["function"] = {"name": step.name, "arguments": arguments}
            message = {"role": "assistant", "content": tag, "tool_calls": [call]}
        else:
            call_text = json.dumps({"name": step.name, "arguments": dict(step.kwargs)})
            message = {"role": "assistant", "content": f"{tag}<tool_call>{call_text}</tool_call>"}
        return 200, _completion(message, prompt_tokens=len(messages))


class UserServer(ChatServer):
    """The user: names the task first, then answers ``###STOP###``.

    Offered tools, it first makes its task's user-side gold calls and the
    ``user_calls`` given for its task id (all in one message). ``fail_tasks``:
    task keys whose requests get HTTP 500; ``delay_s``: a pause before each answer.
    """

    def __init__(
        self, tasks: Sequence[Task], user_calls: Mapping[str, Sequence[Action]] | None = None
    ) -> None:
        super().__init__()
        self._by_instruction = {task.instruction: task for task in tasks}
        self._user_calls = dict(user_calls or {})
        self.fail_tasks: set[str] = set()
        self.delay_s = 0.0

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.delay_s:
            time.sleep(self.delay_s)
        messages = body["messages"]
        instruction = messages[0]["content"].split("Instruction: ", 1)[1].split("\nRules:", 1)[0]
        task = self._by_instruction[instruction]
        if task.task_id in self.fail_tasks:
            return 500, {"error": "scripted failure"}
        mine = [m for m in messages if m["role"] == "assistant" and not m.get("tool_calls")]
        gold = [a for i, a in enumerate(task.actions) if task.requestor(i) == "user"]
        gold += self._user_calls.get(task.task_id, [])
        if "tools" in body and gold and not any(m["role"] == "tool" for m in messages):
            calls = [
                {
                    "id": f"u{n}",
                    "type": "function",
                    "function": {"name": a.name, "arguments": json.dumps(dict(a.kwargs))},
                }
                for n, a in enumerate(gold)
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            return 200, _completion(message, prompt_tokens=1)
        content = STOP if mine else first_user_message(task)
        return 200, _completion({"role": "assistant", "content": content}, prompt_tokens=1)
