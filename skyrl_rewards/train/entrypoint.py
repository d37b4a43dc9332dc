"""``python -m skyrl_rewards.train OVERRIDES...``: SkyRL's GRPO entry point with this project's envs.

What SkyRL's own ``main_base`` does, with five differences:

1. The config is :class:`~skyrl_rewards.train.config.TrainConfig`, so the
   env sections take plain ``key=value`` overrides (SkyRL refuses ``+``).
2. The generator comes from :func:`~skyrl_rewards.train.generator.make_generator`:
   masked trajectories reach the loss with all-zero loss masks, and an env
   failure ends one trajectory, not the step.
3. The Ray entrypoint task registers every env installed packages declare
   (``skyrl_rewards``, ``tau_bench_env``, and the alias ``tau_bench`` while no
   other env holds it) before building anything; an env's own id taken by
   another env is an error.
4. With ``reward_pool.config=...`` the named reward pool is started on the
   cluster before training and stopped after it; otherwise an env with
   ``pool: NAME`` connects to a pool started with ``skyrl-rewards pool start``.
5. ``trainer.fully_async.enabled=true`` trains with SkyRL's fully-async trainer
   (:mod:`skyrl_rewards.train.fully_async`); SkyRL's ``main_base`` builds the
   synchronous one whatever the flag says. Such a config is checked before
   anything starts with the trainer's own assertions
   (:func:`~skyrl_rewards.train.fully_async.check_fully_async`).

``--check`` checks what a run would trip on first (the config's types, every
file it names, each env's section, the pool: :mod:`skyrl_rewards.train.check`,
a line per phase), prints this project's sections and exits: no Ray, no GPU
(what the launch scripts' ``--check`` runs). It
silences the notices that importing vLLM, torch and SkyRL prints on a
machine without a GPU (:func:`quiet_gpu_notices`): the check needs none.
"""

import importlib.util
import logging
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields, is_dataclass
from typing import Any

USAGE = """usage: python -m skyrl_rewards.train [--check] KEY=VALUE ...

SkyRL's GRPO trainer (skyrl 0.4) with the envs of skyrl-rewards. Every argument is a
SkyRL override (trainer.*, generator.*, data.*, environment.*), no '+' prefix, plus
this project's sections:

{sections}
trainer.fully_async.enabled=true trains with SkyRL's fully-async trainer (checked first
with the trainer's own assertions).
--check   check the config (types, every file it names, the envs, the pool), a line per phase;
          print this project's sections, exit (no Ray, no GPU)
"""

NO_SKYRL = (
    "python -m skyrl_rewards.train: needs SkyRL 0.4 on Python 3.12, and this Python {python} "
    "has no skyrl package; build its venv (the script finds a Python 3.12 on PATH or pyenv's) "
    "and use it (as the README says): bash scripts/launch/make_skyrl_venv.sh && "
    ". .venv-skyrl/bin/activate"
)


def _field_lines(cls: type, prefix: str) -> list[str]:
    lines = []
    for f in fields(cls):
        default = f.default_factory() if callable(f.default_factory) else f.default
        if is_dataclass(default):
            lines += _field_lines(type(default), f"{prefix}{f.name}.")
        else:
            lines.append(f"  {prefix}{f.name}={default!r}")
    return lines


def usage() -> str:
    """The ``--help`` text: the override syntax and every field of this project's sections."""
    from skyrl_rewards.train.config import (
        SKYRL_HAS_TAU_BENCH,
        RewardPoolLaunchConfig,
        RewardsSkyRLGymConfig,
    )
    from skyrl_rewards.train.env import RewardEnvConfig
    from skyrl_rewards.train.tau_bench_config import TauBenchEnvConfig

    sections = [
        *_field_lines(RewardEnvConfig, "environment.skyrl_gym.skyrl_rewards."),
        *_field_lines(TauBenchEnvConfig, "environment.skyrl_gym.tau_bench_env."),
        "  environment.skyrl_gym.tau_bench.*: "
        + (
            "SkyRL's own tau-bench env (this project's is tau_bench_env)"
            if SKYRL_HAS_TAU_BENCH
            else "as tau_bench_env.*, for the alias id tau_bench"
        ),
        f"  environment.skyrl_gym.on_env_error={RewardsSkyRLGymConfig.on_env_error!r}  (mask | raise)",
        *_field_lines(RewardPoolLaunchConfig, "reward_pool."),
    ]
    return USAGE.format(sections="\n".join(sections))


def quiet_gpu_notices() -> None:
    """Before SkyRL's config imports vLLM: no notices about the missing GPU, for ``--check``.

    On a machine without a GPU the imports print seven lines before
    ``config OK``: vLLM's (Triton has no active driver; ``vllm._C`` and its
    DeepSelect extension cannot load), torch's (no CUDA runtime) and SkyRL's
    own patch notices (loguru). vLLM reads ``VLLM_LOGGING_LEVEL`` at import
    (a value the user set is kept); the others are loggers turned down.
    Errors still show.
    """
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from loguru import logger

    logger.disable("skyrl")


def parse_config(overrides: Sequence[str]) -> Any:
    """``TrainConfig`` from ``overrides``, validated by SkyRL's own ``validate_cfg`` (and, when
    fully async, by its fully-async trainer's assertions)."""
    from skyrl.train.utils import validate_cfg

    from skyrl_rewards.train.config import TrainConfig
    from skyrl_rewards.train.fully_async import check_fully_async

    cfg = TrainConfig.from_cli_overrides(list(overrides))
    validate_cfg(cfg)
    check_fully_async(cfg)
    if cfg.reward_pool.config:
        reward_pool_config(cfg)  # checked before anything starts
    return cfg


def start_reward_pool(cfg: Any) -> Any:
    """Start the pool ``cfg.reward_pool`` names (its mix replaced by ``reward_pool.rewards``'s)."""
    from skyrl_rewards.pool.reward_pool import RewardPool

    return RewardPool.from_config(reward_pool_config(cfg))


def reward_pool_config(cfg: Any) -> Any:
    """The ``PoolConfig`` that ``cfg.reward_pool`` describes.

    Raises ``ValueError`` when the ``skyrl_rewards`` env would connect to a
    pool of another name (the run would stall looking for it).
    """
    from omegaconf import OmegaConf

    from skyrl_rewards.bundled import config_file
    from skyrl_rewards.pool.config import for_streaming, load_pool_config

    launch = cfg.reward_pool
    source = OmegaConf.to_container(OmegaConf.load(config_file(launch.config)), resolve=True)
    if launch.rewards is not None:
        mix = OmegaConf.load(config_file(launch.rewards))
        source["rewards"] = OmegaConf.to_container(mix.rewards, resolve=True)
    pool_config = load_pool_config(source, launch.overrides)
    if cfg.trainer.fully_async.enabled:  # each group waits for its own rewards: latency view
        pool_config = for_streaming(pool_config, launch.overrides)
    env = cfg.environment.skyrl_gym.skyrl_rewards
    if cfg.environment.env_class == "skyrl_rewards" and not env.in_process:
        if env.pool != pool_config.name:
            raise ValueError(
                f"environment.skyrl_gym.skyrl_rewards.pool is {env.pool!r} but reward_pool starts "
                f"{pool_config.name!r}: set one to the other (reward_pool.overrides=[name={env.pool}])"
            )
    return pool_config


def run(cfg: Any) -> None:
    """Train with SkyRL: the envs registered and the generator built inside the Ray task."""
    import ray
    from skyrl.train.utils.utils import initialize_ray

    initialize_ray(cfg)
    pool = start_reward_pool(cfg) if cfg.reward_pool.config else None
    try:
        ray.get(_entrypoint_task().remote(cfg))
    finally:
        if pool is not None:
            pool.shutdown()


def _entrypoint_task() -> Any:
    import ray

    @ray.remote(num_cpus=1)
    def skyrl_rewards_entrypoint(cfg: Any) -> None:
        from skyrl_rewards.train.experiment import RewardsPPOExp
        from skyrl_rewards.train.registration import register_installed_envs

        register_installed_envs()
        RewardsPPOExp(cfg).run()

    return skyrl_rewards_entrypoint


def _summary(cfg: Any) -> str:
    from skyrl_rewards.train.config import SKYRL_HAS_TAU_BENCH

    gym = cfg.environment.skyrl_gym
    # the alias section only where the alias id is the env used (else it is an unused default)
    alias = (
        asdict(gym.tau_bench)
        if not SKYRL_HAS_TAU_BENCH and cfg.environment.env_class == "tau_bench"
        else None
    )
    fully_async = cfg.trainer.fully_async
    trainer = (
        f"fully async (workers={fully_async.num_parallel_generation_workers}, "
        f"max_staleness_steps={fully_async.max_staleness_steps}, "
        f"policy_loss_type={cfg.trainer.algorithm.policy_loss_type})"
        if fully_async.enabled
        else "synchronous"
    )
    return "\n".join(
        [
            f"environment.env_class: {cfg.environment.env_class}",
            f"environment.skyrl_gym.skyrl_rewards: {asdict(gym.skyrl_rewards)}",
            f"environment.skyrl_gym.tau_bench_env: {asdict(gym.tau_bench_env)}",
            *([] if alias is None else [f"environment.skyrl_gym.tau_bench: {alias}"]),
            f"environment.skyrl_gym.on_env_error: {gym.on_env_error}",
            f"reward_pool: {asdict(cfg.reward_pool)}",
            f"generator.vision_language_generator: {cfg.generator.vision_language_generator}",
            f"trainer: {trainer}",
            f"trainer.strategy: {cfg.trainer.strategy}",
            f"trainer.logger: {cfg.trainer.logger}",
            "config OK",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the entry point (see the module docstring); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if importlib.util.find_spec("skyrl") is None:
        print(NO_SKYRL.format(python=platform.python_version()), file=sys.stderr)
        return 2
    if {"-h", "--help"} & set(args):
        print(usage())
        return 0
    check = "--check" in args
    overrides = [a for a in args if a != "--check"]
    if check:
        return run_check(overrides)
    try:
        cfg = parse_config(overrides)
    except (ValueError, FileNotFoundError, AssertionError) as error:  # SkyRL validates by assert
        print(f"python -m skyrl_rewards.train: config error: {error}", file=sys.stderr)
        return 2
    run(cfg)
    return 0


def _say(line: str) -> None:
    """A phase's line on stdout; a problem (indented) on stderr, as errors go."""
    print(line, file=sys.stderr if line.startswith("  ") else sys.stdout, flush=True)


def run_check(overrides: Sequence[str]) -> int:
    """``--check``: every phase of :mod:`skyrl_rewards.train.check`, a line each; 2 on a problem."""
    from skyrl_rewards.train.check import check

    quiet_gpu_notices()
    cfg, problems = check(overrides, reward_pool_config, say=_say)
    if problems:
        print(
            f"python -m skyrl_rewards.train: config error: {problems} problem"
            f"{'s' * (problems > 1)} (listed above); fix them and check again",
            file=sys.stderr,
        )
        return 2
    print(_summary(cfg))
    return 0
