"""Chat clients for synchronous code: one private event loop thread per process.

:func:`post_chat` posts from any thread and blocks for the reply, on one
:class:`~skyrl_rewards.rewards.models.chat_client.ChatClient` per endpoint
configuration, so its limits and breaker hold for the whole process;
:func:`loop_thread` is that loop (started on first use, and anew in a forked
child), which the judge's
:func:`~skyrl_rewards.rewards.models.judge_client.run_judge_requests` shares.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from skyrl_rewards.rewards.contract.lanes import endpoint_key
from skyrl_rewards.rewards.models.chat_client import ChatClient, ChatReply, ReplyCheck
from skyrl_rewards.rewards.models.endpoint_config import EndpointConfig


class LoopThread:
    """A private event loop on a daemon thread, with the process's clients by key."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.clients: dict[str, ChatClient] = {}
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="skyrl-rewards-chat", daemon=True
        )
        self.thread.start()

    def submit(self, coroutine: Any) -> Future[Any]:
        """Run ``coroutine`` on the loop; its future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)


_LOCK = threading.Lock()

_LOOP: LoopThread | None = None


def loop_thread() -> LoopThread:
    """This process's private loop thread (started on first use, and anew in a forked child)."""
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP.pid != os.getpid():
            _LOOP = LoopThread()
        return _LOOP


def current_loop_thread() -> LoopThread | None:
    """This process's loop thread if it has started one, else ``None`` (starts nothing)."""
    loop = _LOOP
    return loop if loop is not None and loop.pid == os.getpid() else None


def post_chat(
    config: EndpointConfig, body: Mapping[str, Any], check: ReplyCheck | None = None
) -> ChatReply:
    """POST ``body`` to ``config``'s endpoint from synchronous code; blocks until the reply or failure.

    The call runs on the process's private loop thread, on one
    :class:`ChatClient` per endpoint configuration (so its limits and breaker
    hold for every thread of the process that posts to it). No cache: each
    call is sent. Raises ``ValueError`` for an unset API key variable. The
    wait is bounded by ``deadline_s``.
    """
    key = "chat:" + endpoint_key(dataclasses.asdict(config))
    loop = loop_thread()

    async def send() -> ChatReply:
        client = loop.clients.get(key)
        if client is None:
            client = loop.clients[key] = ChatClient(config)
        return await client.post(body, check)

    return loop.submit(send()).result(timeout=config.deadline_s + 60.0)
