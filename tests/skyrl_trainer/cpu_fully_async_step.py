"""Real SkyRL 0.4 ``FullyAsyncRayPPOTrainer`` steps on CPU, through this project's experiment.

``python tests/skyrl_trainer/cpu_fully_async_step.py {text,rec_qwen3} OUT_DIR`` builds what
``cpu_training_step.py`` builds (a tiny random Qwen2 policy and its tokenizer, this project's
rows, a ``TrainConfig`` as ``python -m skyrl_rewards.train`` parses it, the stand-ins of
``stand_ins.py`` for the GPU parts only) with ``trainer.fully_async.enabled=true``, and runs
``RewardsPPOExp(cfg).run()`` for three training steps: SkyRL's generation workers call the
generator once per group, concurrently, while the policy trains; each step pauses generation
at the engine, syncs the weights and resumes it.

``text``: one dataset, both envs (SkyRL routes each row to the ``env_class`` it names), six
groups of two samples, two groups a step:

- three tau-bench retail tasks that write data (backend tau2), the user played by a model
  behind a real OpenAI-compatible chat endpoint on loopback (``tests/models/judge_server.py``,
  scripted: a first message, then ``###STOP###``). Sample 0 plays the gold actions, sample 1
  says goodbye at once. For the second task the user endpoint answers the goodbye with a 500
  (the user simulator fails: that trajectory is masked by the env); the third task's row names
  a task index the env refuses (``env.init`` raises: both trajectories end as SkyRL's
  ``rollout_error`` placeholders, a group with nothing to train on).
- three math rows of ``skyrl_rewards/sample_data`` scored by a reward pool started from
  ``configs/math.yaml``: sample 0 plays the row's own answer, sample 1 is sampled by the
  engine; the third row names an unknown accuracy method (a dataset error: masked).

Fully async settings: ``policy_mini_batch_size=2`` groups, ``max_staleness_steps=1``, four
generation workers (SkyRL's bound: ``2 <= workers <= 2 * (1 + 1)``), policy loss ``rollout_is``.

``rec_qwen3``: ``cpu_training_step``'s REC rows for a tiny random Qwen3-VL (three prompts,
three samples: the gold box, a wrong box, a sample; the third row's solution malformed, so
masked) through ``MaskingVLMGymGenerator`` and a reward pool started from
``configs/rec.yaml``; one group a step, two generation workers. The first prompt's third
sample is scripted with an image placeholder token (``<|image_pad|>``, which SkyRL's policy
forward would read as an image slot): the generator's guard ends it as a ``rollout_error``
stand-in.

It writes ``OUT_DIR/summary.json``: every group the generator returned (its trajectories,
rewards, masks, stop reasons, the step it was scheduled at, its start and end), each training
step's groups and staleness, the trainer's logged metrics, the engine's event log (generations,
pauses, weight loads, resumes in the order they reached it), weights' checksums, the pool's
task count, the user endpoint's calls and errors, the warnings the generator logged (the first
cause of each kind of failed trajectory), and SkyRL's loss and gradient norm on the masked rows
alone (advantages forced to 1.0), with the same rows unmasked as the control.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT), str(HERE.parent / "models"), str(ROOT / "scripts" / "data")]

from cpu_training_step import (  # noqa: E402 - installs the CPU stand-ins before torch
    REC_FAMILIES,
    build_policy,
    build_vision_policy,
    corpus,
    exported_checksum,
    gold_and_goodbye,
    masked_rows_gradient,
    math_data,
    rec_data,
    retail_writes,
    start_engine,
    start_ray,
    train_config,
)
from stand_ins import (  # noqa: E402
    StandInEngine,
    StandInEngineClient,
    VisionStandInEngine,
    VisionStandInEngineClient,
    weights_checksum,
)

USER_FIRST = "Hi, I need help with my order."
STOP = "###STOP###"
GOODBYE = "Goodbye."
REFUSED_TASK_INDEX = 10_000
"""A task index past the split: the tau env refuses the row when it is made."""
PLACEHOLDER_TRAJECTORY = "0_2"
"""The REC trajectory whose scripted response holds an image placeholder token."""
PLACEHOLDER_REPLY = "<|image_pad|> <think>It is here.</think> <answer>[0, 0, 10, 10]</answer>"


def tau_rows(out: Path) -> tuple[Path, dict[str, list[str]], list[str]]:
    """Three retail tasks that write data (the third refused by the env); the scripted
    replies (gold, goodbye); each task's instruction."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tau_bench_dataset import dataset_rows

    tasks, writes = retail_writes(3)
    all_rows = dataset_rows("tau2", "retail", "test")
    rows = [dict(all_rows[i]) for i in writes]
    rows[2]["task_index"] = REFUSED_TASK_INDEX
    parquet = out / "tau.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    return parquet, gold_and_goodbye(tasks, writes), [tasks[i].instruction for i in writes]


def user_endpoint(failing_instruction: str) -> Any:
    """The user simulator's chat endpoint: a first message, then STOP; a 500 for the goodbye
    of the task whose instruction is ``failing_instruction``."""
    from judge_server import JudgeServer
    from loopback_server import Response

    def reply(body: dict[str, Any]) -> str:
        return USER_FIRST if len(body["messages"]) <= 2 else STOP

    def plan(n: int, body: dict[str, Any]) -> Response | None:
        messages = body["messages"]
        failing = failing_instruction in str(messages[0]["content"])
        return Response(status=500) if failing and messages[-1]["content"] == GOODBYE else None

    return JudgeServer(reply=reply, plan=plan)


NO_GPU_METRICS = [
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.enable_ray_gpu_monitor=false",
]
"""No GPUs to monitor and no vLLM metrics to scrape (they poll the cluster every 5 s)."""

FULLY_ASYNC_TEXT = [
    *NO_GPU_METRICS,
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "trainer.max_training_steps=3",
    "trainer.fully_async.enabled=true",
    "trainer.fully_async.max_staleness_steps=1",
    "trainer.fully_async.num_parallel_generation_workers=4",
    "trainer.algorithm.policy_loss_type=rollout_is",
]
"""Three steps of two groups, staleness 1: four groups may start before step 1 trains."""

FULLY_ASYNC_REC = [
    *NO_GPU_METRICS,
    "trainer.train_batch_size=1",
    "trainer.policy_mini_batch_size=1",
    "trainer.max_training_steps=3",
    "trainer.fully_async.enabled=true",
    "trainer.fully_async.max_staleness_steps=1",
    "trainer.fully_async.num_parallel_generation_workers=2",
    "trainer.algorithm.policy_loss_type=rollout_is",
]
"""Three steps of one group of three, staleness 1: two groups may start before step 1 trains."""


def text_overrides(user_url: str) -> list[str]:
    return [
        "environment.env_class=tau_bench_env",
        "environment.skyrl_gym.tau_bench_env.backend=tau2",
        "environment.skyrl_gym.tau_bench_env.domain=retail",
        "environment.skyrl_gym.tau_bench_env.user.kind=openai",
        f"environment.skyrl_gym.tau_bench_env.user.base_url={user_url}",
        "environment.skyrl_gym.tau_bench_env.user.model=user-simulator",
        "environment.skyrl_gym.tau_bench_env.user.max_retries=0",
        "environment.skyrl_gym.tau_bench_env.user.timeout_s=30",
        "environment.skyrl_gym.skyrl_rewards.pool=step_pool",
        "reward_pool.config=configs/math.yaml",
        "reward_pool.overrides=[name=step_pool,num_workers=1]",
        "generator.use_conversation_multi_turn=true",
        "generator.max_turns=30",
        "generator.max_input_length=400000",
        "trainer.max_prompt_length=400000",
        *FULLY_ASYNC_TEXT,
    ]


class Observed(logging.Handler):
    """What the run did, recorded from outside SkyRL's code (wrapped methods, nothing changed);
    as a logging handler, the generator's warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.groups: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.batches: list[Any] = []
        self.logs: list[dict[str, Any]] = []
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.warnings.append(record.getMessage())


def experiment(cfg: Any, client: StandInEngineClient, seen: Observed) -> Any:
    """``RewardsPPOExp`` with the stand-in engine as its inference client; observed, not changed."""
    from skyrl_rewards.train.experiment import RewardsPPOExp

    class StandInEngineExp(RewardsPPOExp):
        def get_inference_client(self) -> Any:
            return client

        def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
            generator = super().get_generator(cfg, tokenizer, inference_engine_client)
            generate = generator.generate

            async def recorded(input_batch: Any, disable_tqdm: bool = False) -> Any:
                scheduled = self.trainer.global_step
                started = time.monotonic()
                out = await generate(input_batch, disable_tqdm=disable_tqdm)
                ids = input_batch["trajectory_ids"]
                seen.groups.append(
                    {
                        "uid": ids[0].instance_id,
                        "env": input_batch["env_classes"][0],
                        "scheduled_step": scheduled,
                        "start": started,
                        "end": time.monotonic(),
                        "trajectories": [f"{t.instance_id}_{t.repetition_id}" for t in ids],
                        "rewards": [sum(r) if isinstance(r, list) else r for r in out["rewards"]],
                        "masked": [bool(m.get("should_mask")) for m in out["env_metrics"]],
                        "loss_tokens": [sum(m) for m in out["loss_masks"]],
                        "stop_reasons": list(out["stop_reasons"]),
                        "metrics": {
                            k: v
                            for k, v in out["rollout_metrics"].items()
                            if k.startswith("generate/")
                        },
                    }
                )
                return out

            generator.generate = recorded
            return generator

        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            trainer = super().get_trainer(*args, **kwargs)
            convert = trainer.convert_generation_group_mini_batch_to_training_input
            compute = trainer.compute_advantages_and_returns
            log = trainer.tracker.log

            def converted(groups: Any, dropped: Any = None) -> Any:
                seen.steps.append(
                    {
                        "step": trainer.global_step,
                        "uids": [g.uid for g in groups],
                        "staleness": [
                            trainer.global_step - g.global_step_when_scheduled for g in groups
                        ],
                    }
                )
                return convert(groups, dropped)

            def advantages(data: Any) -> Any:
                data = compute(data)
                seen.batches.append(data)
                return data

            def logged(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
                seen.logs.append({k: v for k, v in data.items() if isinstance(v, (int, float))})
                return log(data, *args, **kwargs)

            trainer.convert_generation_group_mini_batch_to_training_input = converted
            trainer.compute_advantages_and_returns = advantages
            trainer.tracker.log = logged
            return trainer

    return StandInEngineExp(cfg)


RAY_START_ATTEMPTS = 3


def start_ray_when_it_comes_up(cfg: Any) -> None:
    """``start_ray``, tried again when Ray's node misses its fixed 30 s start-up deadline (a
    loaded machine: other Ray clusters and test runs starting at the same moment)."""
    import ray

    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            start_ray(cfg)
            return
        except Exception as error:  # Ray raises a bare Exception for it
            if "timed out during startup" not in str(error) or attempt == RAY_START_ATTEMPTS:
                raise
            ray.shutdown()


def masked_gradient(trainer: Any, batches: list[Any]) -> dict[str, float]:
    """SkyRL's loss and grad norm on the masked rows of the first batch where one of them was
    played out (a fallback reward). A failed rollout's stand-in alone makes no control: its
    rollout logprob is 0.0, and ``rollout_is`` zeroes a token whose ratio (here the tiny
    policy's probability of that token) is out of its range, masked or not."""
    for batch in batches:
        masked = [i for i, row in enumerate(batch["loss_mask"]) if not row.any()]
        if any(batch["rollout_logprobs"][i].any() for i in masked):
            return masked_rows_gradient(trainer, batch, masked)
    return {}


def text_setup(out: Path, stack: contextlib.ExitStack) -> dict[str, Any]:
    """The tau + math run: rows, replies, policy, overrides (the user endpoint on ``stack``)."""
    tau, replies, instructions = tau_rows(out)
    (math,), math_replies, _ = math_data(out)
    offset = 3  # the math rows follow the three tau rows in the dataset (their uids)
    replies |= {
        f"{int(k.split('_')[0]) + offset}_{k.split('_')[1]}": v for k, v in math_replies.items()
    }
    data = [tau, math]
    user = stack.enter_context(user_endpoint(instructions[1]))
    return {
        "data": data,
        "replies": replies,
        "overrides": text_overrides(user.url),
        "policy": build_policy(out / "policy", corpus(data, replies)),
        "vision": False,
        "user": user,
    }


def rec_setup(out: Path, task: str) -> dict[str, Any]:
    """The REC run: ``cpu_training_step``'s rows for the family, fully async."""
    data, replies, overrides, gold = rec_data(out, task)
    replies[PLACEHOLDER_TRAJECTORY] = [PLACEHOLDER_REPLY]
    return {
        "data": data,
        "replies": replies,
        "overrides": [*overrides, *FULLY_ASYNC_REC],
        "policy": build_vision_policy(out / "policy", REC_FAMILIES[task], corpus(data, replies)),
        "vision": True,
        "gold": gold,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["text", "rec_qwen3"])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    import ray
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from skyrl_rewards.train.entrypoint import start_reward_pool
    from skyrl_rewards.train.env import shared_pool
    from skyrl_rewards.train.registration import register_installed_envs

    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        setup = text_setup(out, stack) if args.task == "text" else rec_setup(out, args.task)
        vision, policy = setup["vision"], setup["policy"]
        auto_model = AutoModelForImageTextToText if vision else AutoModelForCausalLM
        engine_cls = VisionStandInEngine if vision else StandInEngine
        client_cls = VisionStandInEngineClient if vision else StandInEngineClient
        initial = weights_checksum(auto_model.from_pretrained(policy).state_dict())
        cfg = train_config(policy, setup["data"], out, setup["overrides"])
        start_ray_when_it_comes_up(cfg)
        pool = start_reward_pool(cfg)
        try:
            register_installed_envs()
            engine, client = start_engine(engine_cls, client_cls, policy, setup["replies"])
            seen = Observed()
            logging.getLogger("skyrl_rewards.train.generator").addHandler(seen)
            exp = experiment(cfg, client, seen)
            run_started = time.perf_counter()
            exp.run()
            run_s = time.perf_counter() - run_started
            trainer = exp.trainer
            engine_report = ray.get(engine.report.remote())
            engine_now = ray.get(engine.checksum.remote())
            exported = exported_checksum(trainer, out / "exported", auto_model)
            gradient = masked_gradient(trainer, seen.batches)
            pool_tasks = shared_pool("step_pool").metrics().get("tasks")
        finally:
            pool.shutdown()
        user = setup.get("user")
        user_endpoint_seen = {"calls": user.calls, "errors": user.errors} if user else {}
    summary = {
        "task": args.task,
        "groups": seen.groups,
        "steps": seen.steps,
        "batch_loss_tokens": [[int(row.sum()) for row in b["loss_mask"]] for b in seen.batches],
        "batch_image_rows": [
            [list(t.shape) for t in b["pixel_values"].tensors] if vision else []
            for b in seen.batches
        ],
        "logs": seen.logs,
        "engine": {
            "events": engine_report["events"],
            "generated": engine_report["generated"],
            "rendered_images": engine_report.get("rendered_images"),
        },
        "weights": {
            "initial": initial,
            "engine_syncs": engine_report["synced"],
            "engine_now": engine_now,
            "policy_export_after_training": exported,
        },
        "masked_rows_gradient": gradient,
        "pool_tasks": pool_tasks,
        "user_endpoint": user_endpoint_seen,
        "generator_warnings": seen.warnings,
        "gold": setup.get("gold", {}),
        "run_s": round(run_s, 2),
        "total_s": round(time.perf_counter() - started, 2),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    sys.stdout.write(json.dumps({k: summary[k] for k in ("run_s", "total_s")}) + "\n")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
