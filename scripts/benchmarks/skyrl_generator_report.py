"""Per-trajectory output of SkyRL 0.4's generators with this project's envs (no GPU).

Runs the scenarios of tests/skyrl_trainer through ``make_generator`` (SkyRL's
real generators, PromptDataset and config parser; the inference engine is the
tests' scripted stand-in) and prints, per trajectory: the reward on the last
token, the loss-mask sum over the response, whether the env masked it, and
the batch's masking metrics. Needs the SkyRL venv (scripts/launch/make_skyrl_venv.sh):

    .venv-skyrl/bin/python scripts/benchmarks/skyrl_generator_report.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import ray

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "skyrl_trainer"))

import test_skyrl_training_path as scenarios  # noqa: E402
from skyrl_helpers import ScriptedEngine, build_tokenizer  # noqa: E402

from skyrl_rewards.pool.reward_pool import RewardPool  # noqa: E402
from skyrl_rewards.train.config import TrainConfig  # noqa: E402
from skyrl_rewards.train.env import close_shared_pools  # noqa: E402
from skyrl_rewards.train.generator import make_generator  # noqa: E402
from skyrl_rewards.train.registration import register_installed_envs  # noqa: E402


def report(title: str, batch: dict, out: dict) -> None:
    print(f"\n{title}")
    print(f"{'trajectory':<12}{'reward':>8}{'loss-mask sum':>15}{'tokens':>8}  should_mask")
    ids = batch.get("trajectory_ids") or range(len(out["rewards"]))
    for tid, reward, mask, metrics in zip(
        ids, out["rewards"], out["loss_masks"], out["env_metrics"], strict=True
    ):
        name = f"{tid.instance_id}_{tid.repetition_id}" if hasattr(tid, "instance_id") else str(tid)
        total = sum(reward) if isinstance(reward, list) else reward
        print(
            f"{name:<12}{total:>8.3f}{sum(mask):>15}{len(mask):>8}  {metrics.get('should_mask', 0.0)}"
        )
    metrics = out["rollout_metrics"]
    for key in ("generate/masked_share", "generate/env_errors", "environment/should_mask"):
        if key in metrics:
            print(f"  {key} = {metrics[key]}")


def main() -> None:
    tokenizer = build_tokenizer()
    register_installed_envs()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    pool = RewardPool.from_config(
        ROOT / "configs" / "rec.yaml", ["name=report_pool", "num_workers=1"]
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            rows = scenarios.rec_rows(tmp_path)
            train, val = scenarios.prepare_data(
                tmp_path / "rec.jsonl", tmp_path / "data", "skyrl_rewards"
            )
            (tmp_path / rows[3]["image_path"]).unlink()
            batch = scenarios.dataset_batch([train, val], tokenizer, "skyrl_rewards")
            box = rows[1]["solution"].split("<answer>")[1].split("</answer>")[0]
            replies = {
                "0_0": [rows[0]["completion"]],
                "1_0": [f'<think>I see it.</think> <answer>{{"bbox_2d": {box}}}</answer>'],
                "2_0": ["I cannot tell."],
                "3_0": [rows[3]["completion"]],
            }
            cfg = TrainConfig.from_cli_overrides(
                [
                    *scenarios.COMMON,
                    "generator.vision_language_generator=true",
                    "generator.use_conversation_multi_turn=true",
                    "generator.max_turns=1",
                    "environment.env_class=skyrl_rewards",
                    "environment.skyrl_gym.skyrl_rewards.pool=report_pool",
                ]
            )
            gen = make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer)
            out = asyncio.run(gen.generate(batch, disable_tqdm=True))
            report(
                "REC, SkyRLVLMGymGenerator + reward pool (0: sample answer, 1: gold, "
                "2: malformed, 3: image missing)",
                batch,
                out,
            )

            parquet, tasks = scenarios.tau_parquet(tmp_path, 3)
            batch = scenarios.dataset_batch([parquet], tokenizer, "tau_bench_env", n_samples=2)
            replies = {f"{i}_0": scenarios.gold_turns(t) for i, t in enumerate(tasks)}
            replies |= {f"{i}_1": ["Goodbye."] for i in range(len(tasks))}
            cfg = scenarios.tau_cfg("environment.skyrl_gym.tau_bench_env.user.kind=replay")
            out = asyncio.run(
                make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer).generate(
                    batch, disable_tqdm=True
                )
            )
            report(
                "tau-bench retail, SkyRLGymGenerator (_0: gold actions, _1: gives up)", batch, out
            )

            batch = scenarios.dataset_batch([parquet], tokenizer, "tau_bench_env")
            replies = {f"{i}_0": ["Hello, how can I help?"] for i in range(len(tasks))}
            cfg = scenarios.unreachable_user_cfg()
            out = asyncio.run(
                make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer).generate(
                    batch, disable_tqdm=True
                )
            )
            report("tau-bench retail, user simulator unreachable", batch, out)
    finally:
        close_shared_pools()
        pool.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
