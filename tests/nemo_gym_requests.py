"""NeMo-Gym ``/verify`` requests for the tests: its ``BaseVerifyRequest`` shape (a Responses API
response in ``response``, the task's fields beside it), as its own clients send them."""

from __future__ import annotations

from typing import Any


def verify_request(texts: list[str], *, reasoning: bool = False, **fields: Any) -> dict[str, Any]:
    """A verify request whose assistant message has one ``output_text`` part per text."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []} for text in texts],
    }
    output = [{"type": "reasoning", "id": "rs_1", "summary": []}] if reasoning else []
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 2 + 2?"}]},
        "response": {
            "id": "resp_1",
            "created_at": 1.0,
            "model": "policy",
            "object": "response",
            "output": [*output, message],
            "parallel_tool_calls": False,
            "tool_choice": "none",
            "tools": [],
        },
        **fields,
    }
