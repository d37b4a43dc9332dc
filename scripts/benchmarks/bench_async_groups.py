"""What a reward costs a group in SkyRL's fully-async loop: group completion time with and without it.

SkyRL 0.4's ``FullyAsyncRayPPOTrainer`` runs ``num_parallel_generation_workers``
asyncio tasks, each calling ``generator.generate`` for one group (one prompt x
``n_samples_per_prompt``) at a time, round after round; the agent loop of every
trajectory runs ``env.step`` in the generator's thread pool
(``environment.skyrl_gym.max_env_workers`` threads). This script does the same
with this project's generator (``make_generator``: SkyRL's own agent loop) and a
stand-in inference engine that answers after a realistic latency (``--ttft-s``
per turn plus ``--per-token-s`` per response token, the response lengths drawn
per trajectory), and times each group from ``generate`` called to returned.

Every run pairs each rewarded group (even) with an unrewarded one (odd), in the
same run and under the same load, so that the difference is the reward's cost
and not the machine's mood. Reward paths (``--modes``):

- ``pool``: the ``skyrl_rewards`` env scoring through a running reward pool
  (``configs/pool.yaml``, the shipped defaults: 2 workers, accuracy + format, in
  the latency view the entry point gives a fully-async run: ``first_pass_s`` 0.1;
  ``--pool first_pass_s=0`` measures the makespan view);
- ``skyrl``: SkyRL's own path, the reward computed inside ``env.step`` in its
  thread pool (the ``skyrl_rewards`` env with ``in_process: true``, same mix;
  for tau, tau-bench's env as it is).

The unrewarded groups use an env whose ``step`` returns 0.0 at once (math), or
tau-bench's env with the episode's score replaced by a constant (tau: the
episode plays out the same without tau-bench's check at the end).

Workload ``math``: every group a math prompt, 8 answers of which a few repeat (as
GRPO samples do), right and wrong, LaTeX fractions. ``--hangs N`` gives N rewarded
groups one answer that makes math-verify run for ever (bounded by accuracy's math
limit, 3 s of CPU): their completion time is reported apart, and the other
groups' show whether a hang delays anyone else.

Workload ``tau``: tau-bench retail episodes (tau2 backend, the replay user), the
agent's turns scripted (2-4 messages, the last a goodbye), each turn behind the
engine's latency; the reward is tau-bench's (data hash, ground-truth replay),
computed by the env at the end, in SkyRL's thread pool.

Reported per run: median / p90 / p99 group completion time of the rewarded and
the unrewarded groups, the median time past a group's floor (its slowest
trajectory's engine time: what SkyRL, the env and the reward added), the
rewarded median's increase over the unrewarded one, and the groups with a hang.
Target (issue 45): under 5% at 256 groups, and a hang delays only its own group.

    /work/main/.venv-skyrl/bin/python scripts/benchmarks/bench_async_groups.py --groups 256 768 --hangs 4
    /work/main/.venv-skyrl/bin/python scripts/benchmarks/bench_async_groups.py --workload tau --groups 64 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep a local Ray on loopback

import benchlib  # noqa: E402

MODES = ("pool", "skyrl")
NO_REWARD_ENV = "bench_no_reward"
TAU_NO_REWARD_ENV = "bench_tau_no_reward"
UNREWARDED = (NO_REWARD_ENV, TAU_NO_REWARD_ENV)
POOL_NAME = "bench_async_groups"
HANG_ANSWERS = [
    "$\\Gamma(10^{10})$",
    "\\boxed{7^{\\frac{199960002}{2}}}",
    "\\boxed{7^{\\sqrt{10000000000000000}}}",
]
"""Answers that make math-verify compute for ever (tests/test_pool_faults.py): the first the math
pre-screen lets through is the hang."""


@dataclass
class Trajectory:
    """One trajectory's draws: its answer per turn and its response length per turn (tokens)."""

    turns: list[str]
    tokens: list[int]


@dataclass
class Group:
    """One prompt's row and its trajectories (the same draws in every mode)."""

    uid: str
    prompt: list[dict[str, str]]
    extras: dict[str, Any]
    trajectories: list[Trajectory]
    hang: bool = False


@dataclass
class LatencyEngine:
    """Stand-in for SkyRL's inference engine client: scripted replies after a modelled latency.

    A turn of trajectory ``<uid>_<k>`` answers ``turns[t]`` after ``ttft_s + tokens[t] *
    per_token_s`` (the engine's time to first token, then one decode step per token).
    """

    tokenizer: Any
    ttft_s: float
    per_token_s: float
    trajectories: dict[str, Trajectory] = field(default_factory=dict)
    turn: dict[str, int] = field(default_factory=dict)
    model_name: str = "latency-policy"

    async def generate(self, engine_input: Mapping[str, Any], model: str | None = None) -> dict:
        texts, waits = [], []
        for sid in engine_input["session_ids"]:
            trajectory = self.trajectories[sid]
            t = min(self.turn.get(sid, 0), len(trajectory.turns) - 1)
            self.turn[sid] = t + 1
            texts.append(trajectory.turns[t])
            waits.append(self.ttft_s + trajectory.tokens[t] * self.per_token_s)
        await asyncio.sleep(max(waits))
        ids = [
            self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            for text in texts
        ]
        return {
            "responses": texts,
            "response_ids": ids,
            "stop_reasons": ["stop"] * len(texts),
            "response_logprobs": None,
        }

    async def finish_session(self, session_id: str) -> None:
        self.turn.pop(session_id, None)

    def engine_s(self, trajectory: Trajectory) -> float:
        """The engine time of ``trajectory`` alone: the floor of its completion time."""
        return sum(self.ttft_s + n * self.per_token_s for n in trajectory.tokens)


def build_tokenizer() -> Any:
    """A real byte-level BPE tokenizer with ChatML tokens and the Qwen2.5-VL chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_vl_chat_template

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = qwen2_5_vl_chat_template
    return tokenizer


def hang_answer() -> str:
    from skyrl_rewards.rewards.text.math_screen import too_complex

    found = next((a for a in HANG_ANSWERS if not too_complex(a)), None)
    if found is None:
        raise SystemExit("--hangs: the math pre-screen refuses every known hanging answer")
    return found


def math_groups(
    count: int, group_size: int, hangs: int, tokens: tuple[int, int], rng: random.Random
) -> list[Group]:
    """``count`` math groups; groups 0, 2, ..., ``2 * (hangs - 1)`` carry one hanging answer each
    (even groups are the rewarded half of a paired run)."""
    hang = hang_answer() if hangs else ""
    groups = []
    for g in range(count):
        a, b = rng.randint(1, 999), rng.randint(2, 999)
        truth = f"$\\frac{{{a}}}{{{b}}}$"
        answers = [truth, f"$\\frac{{{a + 1}}}{{{b}}}$", f"$\\frac{{{a}}}{{{b + 1}}}$"]
        trajectories = []
        for k in range(group_size):
            hung = g < 2 * hangs and g % 2 == 0
            answer = hang if hung and k == 0 else answers[rng.randrange(len(answers))]
            text = f"<think>{'so ' * rng.randint(1, 20)}</think><answer>{answer}</answer>"
            trajectories.append(Trajectory([text], [rng.randint(*tokens)]))
        groups.append(
            Group(
                uid=f"m{g}",
                prompt=[{"role": "user", "content": f"What is {a}/{b}? Answer in LaTeX."}],
                extras={
                    "reward_spec": {"method": "rule", "ground_truth": f"<answer>{truth}</answer>"}
                },
                trajectories=trajectories,
                hang=g < 2 * hangs and g % 2 == 0,
            )
        )
    return groups


def tau_groups(
    count: int, group_size: int, tokens: tuple[int, int], rng: random.Random
) -> list[Group]:
    """``count`` tau-bench retail groups (tasks in turn), each trajectory 2-4 agent turns."""
    from tau_bench_env.backends import load_domain
    from tau_bench_env.episode.env import TauBenchEnv  # noqa: F401  (registers the env)

    tasks = load_domain("tau2", "retail").tasks("test")
    groups = []
    for g in range(count):
        index = g % len(tasks)
        trajectories = []
        for _ in range(group_size):
            n = rng.randint(2, 4)
            turns = [f"Let me look into that for you (step {t})." for t in range(n - 1)]
            turns.append("Thank you, goodbye.")
            trajectories.append(Trajectory(turns, [rng.randint(*tokens) for _ in turns]))
        groups.append(
            Group(
                uid=f"t{g}",
                prompt=[{"role": "system", "content": "You are a retail agent."}],
                extras={
                    "task_index": index,
                    "split": "test",
                    "user_turns": ["Hi, I need help with my order."] * 4,
                },
                trajectories=trajectories,
            )
        )
    return groups


def register_no_reward_env() -> None:
    """The unrewarded math groups' env: ``step`` ends the episode with reward 0.0 at once."""
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry

    class NoRewardEnv(BaseTextEnv):
        def __init__(self, env_config: Any = None, extras: Any = None) -> None:
            super().__init__()

        def step(self, action: str) -> BaseTextEnvStepOutput:
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={})

    if NO_REWARD_ENV not in registry:
        register(id=NO_REWARD_ENV, entry_point=NoRewardEnv)


def make_config(workload: str, mode: str, rewards: Mapping[str, Any], env_workers: int) -> Any:
    from skyrl_rewards.train.config import TrainConfig
    from skyrl_rewards.train.env import RewardEnvConfig

    overrides = [
        "trainer.logger=console",
        "generator.batched=false",
        f"environment.skyrl_gym.max_env_workers={env_workers}",
    ]
    if workload == "tau":
        overrides += [
            "generator.use_conversation_multi_turn=true",
            "generator.max_turns=10",
            "generator.max_input_length=200000",
            "environment.env_class=tau_bench_env",
            "environment.skyrl_gym.tau_bench_env.backend=tau2",
            "environment.skyrl_gym.tau_bench_env.domain=retail",
            "environment.skyrl_gym.tau_bench_env.user.kind=replay",
        ]
    cfg = TrainConfig.from_cli_overrides(overrides)
    if workload == "tau":  # SkyRL hands an env the section named after its env class
        setattr(
            cfg.environment.skyrl_gym, TAU_NO_REWARD_ENV, cfg.environment.skyrl_gym.tau_bench_env
        )
    if workload == "math":
        cfg.environment.skyrl_gym.skyrl_rewards = RewardEnvConfig(
            pool=POOL_NAME, in_process=mode == "skyrl", rewards=rewards if mode == "skyrl" else {}
        )
    return cfg


async def run_groups(
    generator: Any,
    groups: Sequence[Group],
    classes: Mapping[str, str],
    workers: int,
    group_size: int,
) -> dict[str, float]:
    """``workers`` tasks take groups in turn and ``generate`` each, as the fully-async trainer
    does; returns each group's completion time (seconds) by uid."""
    from skyrl.train.generators.base import TRAINING_PHASE_TRAIN
    from skyrl.train.generators.utils import prepare_generator_input

    queue: asyncio.Queue[Group] = asyncio.Queue()
    for group in groups:
        queue.put_nowait(group)
    times: dict[str, float] = {}

    async def worker() -> None:
        while not queue.empty():
            group = queue.get_nowait()
            cls = classes[group.uid]
            row = {
                "prompt": group.prompt,
                "env_class": cls,
                "env_extras": group.extras,
                "uid": group.uid,
            }
            batch, _ = prepare_generator_input(
                [row], group_size, None, cls, TRAINING_PHASE_TRAIN, 1
            )
            start = time.monotonic()
            await generator.generate(batch, disable_tqdm=True)
            times[group.uid] = time.monotonic() - start

    await asyncio.gather(*(worker() for _ in range(workers)))
    return times


def summary(times: Mapping[str, float], floors: Mapping[str, float], uids: Sequence[str]) -> dict:
    values = [times[u] for u in uids]
    over = [times[u] - floors[u] for u in uids]
    return {
        "groups": len(values),
        "median_s": benchlib.median(values),
        "p90_s": round(benchlib.percentile(values, 0.9), 3),
        "p99_s": round(benchlib.percentile(values, 0.99), 3),
        "max_s": round(max(values), 3),
        "median_over_s": benchlib.median(over),
        "p99_over_s": round(benchlib.percentile(over, 0.99), 3),
    }


def measure(args: argparse.Namespace, groups_count: int, rng: random.Random) -> dict[str, Any]:
    from skyrl_rewards.train.env import close_shared_pools
    from skyrl_rewards.train.generator import make_generator

    tokens = (args.min_tokens, args.max_tokens)
    groups = (
        math_groups(groups_count * args.rounds, args.group_size, args.hangs, tokens, rng)
        if args.workload == "math"
        else tau_groups(groups_count * args.rounds, args.group_size, tokens, rng)
    )
    tokenizer = build_tokenizer()
    engine = LatencyEngine(tokenizer, args.ttft_s, args.per_token_s)
    floors = {}
    hang = {g.uid: g.hang for g in groups}
    for group in groups:
        for k, trajectory in enumerate(group.trajectories):
            engine.trajectories[f"{group.uid}_{k}"] = trajectory
        floors[group.uid] = max(engine.engine_s(t) for t in group.trajectories)
    rewards = load_rewards()
    runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for repeat in range(args.repeats):
        for mode in args.modes:
            cfg = make_config(args.workload, mode, rewards, args.env_workers)
            generator = make_generator(cfg, engine, tokenizer)
            classes = {g.uid: group_env_class(args.workload, mode, i) for i, g in enumerate(groups)}
            start = time.monotonic()
            times = asyncio.run(
                run_groups(generator, groups, classes, groups_count, args.group_size)
            )
            wall_s = time.monotonic() - start
            generator.env_executor.shutdown(wait=True)
            close_shared_pools()
            unrewarded = [g.uid for g in groups if classes[g.uid] in UNREWARDED]
            rewarded = [g.uid for g in groups if classes[g.uid] not in UNREWARDED]
            row: dict[str, Any] = {"wall_s": round(wall_s, 2), "load": benchlib.load()}
            row["rewarded"] = summary(times, floors, [u for u in rewarded if not hang[u]])
            row["none"] = summary(times, floors, unrewarded)
            if any(hang.values()):
                row["hang_groups"] = summary(times, floors, [u for u in hang if hang[u]])
            runs[mode].append(row)
            benchlib.progress(
                f"{groups_count} groups, {mode}, repeat {repeat + 1}: {json.dumps(row)}"
            )
    return runs


def group_env_class(workload: str, mode: str, index: int) -> str:
    """The env of group ``index``: each rewarded group (even) is paired with an unrewarded one
    (odd) in the same run, under the same load."""
    unrewarded = index % 2 == 1
    if workload == "tau":
        return TAU_NO_REWARD_ENV if unrewarded else "tau_bench_env"
    return NO_REWARD_ENV if unrewarded else "skyrl_rewards"


def load_rewards() -> dict[str, Any]:
    from skyrl_rewards.pool.config import load_pool_config

    return {
        k: dict(v)
        for k, v in load_pool_config(benchlib.REPO / "configs" / "pool.yaml").rewards.items()
    }


def register_tau_no_reward_env() -> None:
    """The tau runs' unrewarded env: tau-bench's env whose episode scores a constant 0.0, so the
    episode plays out the same without tau-bench's check at the end (data hash, ground-truth
    replay, outputs)."""
    from skyrl_gym.envs.registration import register, registry

    from tau_bench_env.episode.env import TauBenchEnv
    from tau_bench_env.episode.reward import RewardResult

    def constant_score(**kwargs: Any) -> RewardResult:
        return RewardResult(reward=0.0, r_actions=False, data_hash="", gt_data_hash="")

    class TauNoRewardEnv(TauBenchEnv):
        def init(self, prompt: Any = None) -> Any:
            out = super().init(prompt)
            self.episode.score = constant_score  # type: ignore[method-assign]
            return out

    if TAU_NO_REWARD_ENV not in registry:
        register(id=TAU_NO_REWARD_ENV, entry_point=TauNoRewardEnv)


def table(results: Mapping[int, Mapping[str, list[dict]]]) -> str:
    """One row per run: the rewarded groups against the unrewarded ones of the same run."""
    lines = [
        "| groups | rewards | rewarded: median / p90 / p99 s | over floor, median s | "
        "unrewarded: median / p90 / p99 s | over floor, median s | median vs unrewarded | "
        "groups with a hang: median / max s | load |",
        "|---:|---|---|---:|---|---:|---:|---|---:|",
    ]
    for groups_count, runs in results.items():
        for mode, rows in runs.items():
            for row in rows:
                rewarded, reference = row["rewarded"], row["none"]
                hang = row.get("hang_groups")
                hangs = f"{hang['median_s']} / {hang['max_s']}" if hang else ""
                vs = (rewarded["median_s"] / reference["median_s"] - 1) * 100
                lines.append(
                    f"| {groups_count} | {mode} | {_spread(rewarded)} | {rewarded['median_over_s']} "
                    f"| {_spread(reference)} | {reference['median_over_s']} | {vs:+.1f}% | "
                    f"{hangs} | {row['load']} |"
                )
    return "\n".join(lines)


def _spread(summary: Mapping[str, float]) -> str:
    return f"{summary['median_s']} / {summary['p90_s']} / {summary['p99_s']}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=("math", "tau"), default="math")
    parser.add_argument(
        "--groups",
        type=int,
        nargs="+",
        default=[256, 768],
        help="concurrent groups (num_parallel_generation_workers)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="groups per worker, back to back")
    parser.add_argument("--group-size", type=int, default=8, help="n_samples_per_prompt")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        help="math: pool skyrl (default; each paired with unrewarded groups in "
        "the same run); tau: skyrl (default), also paired",
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--hangs", type=int, default=0, help="math groups with one hanging answer")
    parser.add_argument("--ttft-s", type=float, default=0.3, help="engine seconds per turn")
    parser.add_argument("--per-token-s", type=float, default=0.01, help="engine seconds per token")
    parser.add_argument("--min-tokens", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=1000)
    parser.add_argument(
        "--env-workers",
        type=int,
        default=32,
        help="environment.skyrl_gym.max_env_workers (SkyRL's default: 32)",
    )
    parser.add_argument("--pool", nargs="*", default=[], help="pool overrides key=value")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.modes is None:
        args.modes = list(MODES) if args.workload == "math" else ["skyrl"]
    if args.workload == "tau" and "pool" in args.modes:
        parser.error("--modes pool: tau-bench's reward is computed by its env (mode skyrl)")

    from skyrl_rewards.pool.config import for_streaming, load_pool_config
    from skyrl_rewards.pool.reward_pool import RewardPool
    from skyrl_rewards.train.registration import register_installed_envs

    register_installed_envs()
    register_no_reward_env()
    register_tau_no_reward_env()
    pool = None
    if args.workload == "math" and "pool" in args.modes:
        # as the entry point starts it for a fully-async run (the latency view, unless --pool
        # sets first_pass_s)
        config = load_pool_config(
            benchlib.REPO / "configs" / "pool.yaml", [f"name={POOL_NAME}", *args.pool]
        )
        pool = RewardPool(for_streaming(config, args.pool))
    results: dict[int, dict[str, list[dict]]] = {}
    try:
        for groups_count in args.groups:
            results[groups_count] = measure(args, groups_count, random.Random(args.seed))
    finally:
        if pool is not None:
            pool.shutdown()
    print(f"{args.workload}: {vars(args)}")
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"args": vars(args), "results": results}, default=str, indent=1)
        )


if __name__ == "__main__":
    sys.exit(main())
