"""The agent's system prompt: the domain policy, the tools and the call format."""

from __future__ import annotations

import json

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.data_model.tasks import Task

TOOL_FORMAT = (
    "# Tools\n\n"
    "You may call one function per turn to assist with the user query. "
    "Function signatures (OpenAI tool schema) are listed inside <tools></tools>:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "To call a function, reply with a JSON object naming it and its arguments "
    "inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>\n\n'
    "Any reply without a tool call is sent to the user."
)


def system_prompt(domain: Domain, task: Task | None = None) -> str:
    """Policy text (``task``'s, :meth:`Domain.policy_for`, when given) followed by the tool
    schemas and the Hermes tool-call format.

    >>> from tau_bench_env.backends import load_domain
    >>> "<tool_call>" in system_prompt(load_domain("tau2", "retail"))
    True
    """
    tools = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in domain.tool_schemas)
    policy = domain.policy if task is None else domain.policy_for(task)
    return policy.strip() + "\n\n" + TOOL_FORMAT.format(tools=tools)
