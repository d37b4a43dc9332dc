"""The `skyrl_rewards` env through skyrl_gym.make, in process and through a real reward pool."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import pytest
import skyrl_gym
from omegaconf import OmegaConf
from PIL import Image

from skyrl_rewards.data.jsonl import read_rows, to_samples
from skyrl_rewards.pool.batching import MicroBatcher
from skyrl_rewards.pool.config import PoolConfig, load_pool_config
from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.train.env import (
    ENTRY_POINT,
    ENV_ID,
    RewardEnvConfig,
    SkyRLRewardEnv,
    close_shared_pools,
    shared_pool,
)
from skyrl_rewards.train.registration import (
    EnvIdTakenError,
    register_env,
    register_installed_envs,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
REC_REWARDS = load_pool_config(ROOT / "configs" / "rec.yaml").rewards


@pytest.fixture(scope="module")
def reward_pool_rec(ray_module) -> Iterator[tuple[RewardPool, str]]:
    """A real pool with the REC mix on the session's local Ray, under a name of its own."""
    name = "test_env_rec_pool"
    pool = RewardPool.from_config(ROOT / "configs" / "rec.yaml", [f"name={name}", "num_workers=2"])
    yield pool, name
    close_shared_pools()  # the envs' client of this pool, before the pool goes
    pool.shutdown()


def skyrl_extras(sample: dict) -> dict:
    """What SkyRL's generator passes as ``extras`` for a dataset row (see skyrl_train_launch)."""
    columns = {k: v for k, v in sample.items() if k not in ("completion", "solution", "problem")}
    return {
        "reward_spec": {"method": "rule", "ground_truth": sample["solution"]},
        "max_turns": 1,
        **columns,
    }


def rec_samples() -> list[dict]:
    return to_samples(read_rows(SAMPLE / "rec.jsonl"), SAMPLE)


def test_registered_on_import_and_by_entry_point() -> None:
    assert skyrl_gym.registry[ENV_ID].entry_point == ENTRY_POINT
    pyproject = (ROOT / "pyproject.toml").read_text()
    group = pyproject.split('[project.entry-points."skyrl_gym.envs"]')[1].split("\n[")[0]
    assert f'{ENV_ID} = "{ENTRY_POINT}"' in group


@pytest.mark.parametrize(
    "imports",
    ["import skyrl_rewards; import skyrl_gym", "import skyrl_gym; import skyrl_rewards"],
)
def test_importing_the_package_registers_the_env_in_either_order(imports: str) -> None:
    """``import skyrl_rewards`` alone makes ``skyrl_gym.make("skyrl_rewards")`` work (fresh process)."""
    probe = (
        f"{imports}\n"
        "import sys\n"
        "assert 'skyrl_rewards.train.env' not in sys.modules  # registered by name, not imported\n"
        "env = skyrl_gym.make('skyrl_rewards', env_config={'in_process': True, "
        "'rewards': {'format': {}}}, extras={'reward_spec': {'ground_truth': '<answer>1</answer>'}})\n"
        "print(env.step('<think>a</think><answer>1</answer>')['reward'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "1.0"


def test_register_installed_envs_reads_the_entry_point_group(tmp_path: Path, monkeypatch) -> None:
    # an installed distribution declaring an env, the way pyproject declares ours
    dist = tmp_path / "demo_envs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-envs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[skyrl_gym.envs]\ndemo_reward_env = skyrl_rewards.train.env:SkyRLRewardEnv\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "demo_reward_env" in register_installed_envs()
        env = skyrl_gym.make(
            "demo_reward_env",
            env_config={"in_process": True, "rewards": {"format": {}}},
            extras={"reward_spec": {"ground_truth": "<answer>1</answer>"}},
        )
        assert env.step("<think>a</think><answer>1</answer>")["reward"] == 1.0
    finally:
        skyrl_gym.envs.registration.deregister("demo_reward_env")


def test_an_id_held_by_another_env_is_never_silently_replaced(tmp_path: Path, monkeypatch) -> None:
    skyrl_gym.register(id="demo_taken", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    dist = tmp_path / "demo_taken-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-taken\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[skyrl_gym.envs]\ndemo_taken = {ENTRY_POINT}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(EnvIdTakenError) as caught:
            register_installed_envs()
        message = str(caught.value)
        assert "'demo_taken'" in message and "GSM8kEnv" in message and ENTRY_POINT in message
        assert "environment.env_class" in message  # how to choose
        assert skyrl_gym.registry["demo_taken"].entry_point.endswith("GSM8kEnv")  # untouched
        register_env(ENV_ID, ENTRY_POINT)  # the same entry point again: a no-op
    finally:
        skyrl_gym.envs.registration.deregister("demo_taken")


@pytest.mark.parametrize(
    "env_config",
    [
        {"in_process": True, "rewards": dict(REC_REWARDS)},  # plain dict
        OmegaConf.create({"in_process": True, "rewards": dict(REC_REWARDS)}),  # SkyRL's DictConfig
    ],
)
def test_in_process_step_pays_the_mix(env_config) -> None:
    mix = RewardMix.from_config(REC_REWARDS)
    for sample in rec_samples()[:6]:
        env = skyrl_gym.make(ENV_ID, env_config=env_config, extras=skyrl_extras(sample))
        prompt = [{"role": "user", "content": sample["problem"]}]
        assert env.init(prompt) == (prompt, {})
        out = env.step(sample["completion"])
        expected = mix.score(sample)
        assert out["done"] is True and out["observations"] == []
        assert out["reward"] == pytest.approx(expected.total)
        assert out["metadata"]["components"] == pytest.approx(expected.components)
        assert set(out["metadata"]["status"]) == {"iou", "format_rec"}
        metrics = env.get_metrics()
        assert metrics["reward/iou"] == pytest.approx(expected.components["iou"])
        assert metrics["should_mask"] == 0.0


def test_dataset_error_is_reported_and_masked_not_raised() -> None:
    sample = rec_samples()[0]
    extras = skyrl_extras(sample) | {"image_path": str(SAMPLE / "images" / "missing.png")}
    env = SkyRLRewardEnv({"in_process": True, "rewards": dict(REC_REWARDS)}, extras)
    out = env.step(sample["completion"])
    assert out["metadata"]["status"]["iou"] == "error"
    assert out["metadata"]["should_mask"] is True
    assert "iou" in out["metadata"]["errors"]


def test_boxes_past_the_grid_are_counted_in_the_episode_metrics(tmp_path: Path) -> None:
    """A Qwen3-VL box past 1000 scores as the clamped box; ``clamped_boxes`` says it was clamped."""
    image = tmp_path / "wide.png"
    Image.new("RGB", (2000, 1000)).save(image)
    extras = {
        "reward_spec": {
            "method": "rule",
            "ground_truth": "<answer>[1000, 500, 2000, 1000]</answer>",
        },
        "image_path": str(image),
    }
    config = {"in_process": True, "rewards": {"iou": {"box_format": "qwen3_vl"}}}
    for box, clamped in (([500, 500, 1004, 1000], 1.0), ([500, 500, 1000, 1000], 0.0)):
        env = SkyRLRewardEnv(config, extras)
        out = env.step(f"<answer>{box}</answer>")
        assert out["reward"] == 1.0
        assert out["metadata"]["clamped"] == ({"iou": 1} if clamped else {})
        assert env.get_metrics()["clamped_boxes"] == clamped


def test_null_columns_are_left_out() -> None:
    # a parquet file mixing tasks fills a column a row lacks with null
    env = SkyRLRewardEnv(
        {"in_process": True, "rewards": {"format": {"weight": 1.0}}},
        {"reward_spec": {"ground_truth": "<answer>1</answer>"}, "image_path": None, "max_turns": 1},
    )
    assert "image_path" not in env.sample("x") and "max_turns" not in env.sample("x")


@pytest.mark.parametrize(
    ("env_config", "extras", "field"),
    [
        (
            {"in_process": True},
            {"reward_spec": {"ground_truth": "1"}},
            "env_config.rewards",
        ),  # no mix
        ({"pool": ""}, {"reward_spec": {"ground_truth": "1"}}, "env_config.pool"),  # empty name
        ({"pools": "x"}, {"reward_spec": {"ground_truth": "1"}}, "env_config"),  # typo'd key
        ({"in_process": "no"}, {"reward_spec": {"ground_truth": "1"}}, "env_config.in_process"),
        (
            {"wait_timeout_s": 0},
            {"reward_spec": {"ground_truth": "1"}},
            "env_config.wait_timeout_s",
        ),
        (
            {"wait_timeout_s": "1h"},
            {"reward_spec": {"ground_truth": "1"}},
            "env_config.wait_timeout_s",
        ),
        ({"in_process": True, "rewards": {"format": {}}}, {}, "extras.reward_spec.ground_truth"),
        (
            {"in_process": True, "rewards": {"format": {}}},
            {"reward_spec": {}},
            "extras.reward_spec.ground_truth",
        ),
    ],
)
def test_wrong_config_or_row_raises_value_error_naming_the_field(env_config, extras, field) -> None:
    with pytest.raises(ValueError, match=field):
        skyrl_gym.make(ENV_ID, env_config=env_config, extras=extras)


def test_empty_env_config_uses_the_default_pool_name() -> None:
    # SkyRL passes DictConfig({}) when environment.skyrl_gym.skyrl_rewards is not set
    assert RewardEnvConfig.from_any(OmegaConf.create({})).pool == PoolConfig().name


def test_concurrent_steps_through_a_real_pool(reward_pool_rec) -> None:
    """SkyRL steps envs from a thread pool; every step goes through the named pool."""
    pool, name = reward_pool_rec
    mix = RewardMix.from_config(REC_REWARDS)
    samples = rec_samples()

    def episode(sample: dict) -> dict:
        env = skyrl_gym.make(
            ENV_ID, env_config=OmegaConf.create({"pool": name}), extras=skyrl_extras(sample)
        )
        env.init([{"role": "user", "content": sample["problem"]}])
        out = env.step(sample["completion"])
        env.close()
        return out

    with ThreadPoolExecutor(max_workers=12) as executor:
        outs = list(executor.map(episode, samples))
    for sample, out in zip(samples, outs, strict=True):
        expected = mix.score(sample)
        assert out["done"] is True
        assert out["reward"] == pytest.approx(expected.total), sample["id"]
        assert out["metadata"]["status"] == expected.status
    # all envs of this process share one client, whose micro-batcher gathered their steps
    metrics = shared_pool(name).metrics()
    assert metrics["items"] == len(samples)
    assert metrics["worker_calls"] < len(samples) * len(REC_REWARDS)


def test_pool_mode_checks_a_given_mix_against_the_pool(reward_pool_rec) -> None:
    _, name = reward_pool_rec
    extras = skyrl_extras(rec_samples()[0])
    SkyRLRewardEnv(
        {"pool": name, "rewards": {"iou": {}, "format_rec": {"weight": 1}}}, extras
    )  # same mix
    with pytest.raises(ValueError, match="env_config.rewards: .* differs from the mix of pool"):
        SkyRLRewardEnv({"pool": name, "rewards": {"iou": {"weight": 2.0}}}, extras)


def test_a_pool_that_does_not_run_is_named_with_a_hint(ray_local) -> None:
    env = SkyRLRewardEnv({"pool": "no_such_pool"}, {"reward_spec": {"ground_truth": "1"}})
    with pytest.raises(
        ValueError, match="env_config.pool: no reward pool 'no_such_pool'.*pool start"
    ):
        env.step("<answer>1</answer>")


def test_a_reward_that_never_comes_ends_the_step_after_wait_timeout_s(reward_pool_rec) -> None:
    """The step's wait on the pool is bounded: past ``wait_timeout_s`` it raises, naming why."""
    _, name = reward_pool_rec
    sample = rec_samples()[0]
    env = SkyRLRewardEnv({"pool": name, "wait_timeout_s": 0.5}, skyrl_extras(sample))
    shared_pool(name)  # connected before the batcher is broken
    start = time.monotonic()
    # forced failure in our own code: the client's batcher drops what it is given
    with mock.patch.object(MicroBatcher, "add", lambda self, items: None):
        with pytest.raises(TimeoutError, match="env_config.wait_timeout_s: no reward from pool"):
            env.step(sample["completion"])
    assert time.monotonic() - start < 5.0
