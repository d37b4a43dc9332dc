"""Write a small tau-bench results file from scripted airline trajectories.

Each run is played through tau-bench's *own* ``Env`` (its tools, its
``calculate_reward``) with a scripted user instead of a model, and written in
tau-bench's results format (``task_id``, ``trial``, ``reward``, ``info`` with
``task`` and ``reward_info``, ``traj`` of OpenAI messages with
``tool_calls``). The recorded rewards are therefore tau-bench's, and
``tau-bench-env rescore`` can be checked against them.

Trials per task: the ground truth, and perturbations (a changed argument, a
missing or extra write, a missing output, no ###STOP### = cut off). The
system message keeps only the policy's first line to keep the file small.

Needs the real tau-bench package. Usage:
    python scripts/samples/tau_bench_record_results.py --out tau_bench_env/sample_data/airline_results.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

STOP = "###STOP###"

# task index -> trials; each trial is (plan, reaches the user's ###STOP###).
# A plan is a list of ("tool", name, kwargs) / ("say", text); "GT" expands to
# the task's ground-truth actions, "OUTPUTS" to a reply naming its outputs.
PLANS: dict[int, list[tuple[list[Any], bool]]] = {
    1: [
        (["GT", "OUTPUTS"], True),
        ([("tool", "cancel_reservation", {"reservation_id": "K67C4W"}), "OUTPUTS"], True),
        (["GT"], False),
    ],
    8: [
        (["GT", "OUTPUTS"], True),
        (["GT", ("say", "All done, your new reservation is booked.")], True),
        (["GT", "OUTPUTS"], True),
    ],
    13: [
        (["GT"], True),
        ([("say", "I am sorry, I cannot help with that.")], True),
        (["GT"], True),
    ],
    16: [
        (["GT", "OUTPUTS"], True),
        ([("tool", "get_user_details", {"user_id": "ethan_martin_2396"}), "OUTPUTS"], True),
        (
            [
                "GT",
                ("tool", "send_certificate", {"user_id": "ethan_martin_2396", "amount": 50}),
                "OUTPUTS",
            ],
            True,
        ),
    ],
    44: [
        (["GT", "OUTPUTS"], True),
        (["GT", "OUTPUTS"], True),
        (["GT", ("say", "You have some reservations.")], True),
    ],
}


class ScriptedUser:
    """Stands in for tau-bench's user: answers each reply with the next line."""

    def __init__(self, stops: bool) -> None:
        self._stops = stops

    def reset(self, instruction: str | None = None) -> str:
        return "Hi, I need help with my reservations."

    def step(self, content: str) -> str:
        return STOP if self._stops else "Anything else?"

    def get_total_cost(self) -> float:
        return 0.0


def _expand(plan: list[Any], task: Any) -> list[tuple[str, Any, Any]]:
    steps: list[tuple[str, Any, Any]] = []
    for item in plan:
        if item == "GT":
            steps.extend(("tool", a.name, dict(a.kwargs)) for a in task.actions)
        elif item == "OUTPUTS":
            names = ", ".join(task.outputs) if task.outputs else "all set"
            steps.append(("say", f"Done: {names}. Is there anything else?", None))
        elif item[0] == "say":
            steps.append(("say", item[1], None))
        else:
            steps.append(item)
    return steps


def record_run(env: Any, index: int, trial: int, plan: list[Any], stops: bool) -> dict[str, Any]:
    """Play one run through tau-bench's env and return it in results format."""
    from tau_bench.types import Action, EnvRunResult

    env.user = ScriptedUser(stops)
    reset = env.reset(task_index=index)
    first_line = env.wiki.strip().splitlines()[0]
    traj: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": first_line + "\n(policy text omitted to keep this file small)",
        },
        {"role": "user", "content": reset.observation},
    ]
    info: dict[str, Any] = reset.info.model_dump()
    reward = 0.0
    for number, (kind, first, second) in enumerate(_expand(plan, env.task)):
        if kind == "say":
            response = env.step(Action(name="respond", kwargs={"content": first}))
            traj += [
                {"role": "assistant", "content": first, "tool_calls": None},
                {"role": "user", "content": response.observation},
            ]
        else:
            call_id = f"call_{trial}_{number}"
            response = env.step(Action(name=first, kwargs=second))
            traj += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": first, "arguments": json.dumps(second)},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": first,
                    "content": response.observation,
                },
            ]
        info = {**info, **response.info.model_dump()}
        reward = response.reward
        if response.done:
            break
    return EnvRunResult(
        task_id=index, reward=reward, info=info, traj=traj, trial=trial
    ).model_dump()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tau_bench.envs import get_env

    env = get_env(
        "airline", user_strategy="human", user_model="none", task_split="test", task_index=0
    )
    runs = [
        record_run(env, index, trial, plan, stops)
        for trial in range(3)
        for index, trials in PLANS.items()
        for plan, stops in [trials[trial]]
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(runs)} runs to {args.out}")  # noqa: T201 - script output


if __name__ == "__main__":
    main()
