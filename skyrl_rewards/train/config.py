"""``TrainConfig``: SkyRL's typed training config with this project's env sections.

SkyRL 0.4 builds its config from dataclasses and refuses ``+key=value`` and
unknown keys; new settings come from subclassing. :class:`TrainConfig` is
``SkyRLTrainConfig`` whose ``environment.skyrl_gym`` also carries

- ``skyrl_rewards``: :class:`~skyrl_rewards.train.env.RewardEnvConfig`
  (``pool``, ``in_process``, ``rewards``),
- ``tau_bench_env``: :class:`~skyrl_rewards.train.tau_bench_config.TauBenchEnvConfig`, nested
  ``user`` included: the ``env_config`` of this project's tau-bench env
  (id ``tau_bench_env``);
- ``tau_bench``: the same, for the alias id ``tau_bench``, but only while
  SkyRL's own ``SkyRLGymConfig`` has no ``tau_bench`` field. SkyRL's tau-bench
  env (SkyRL PR #1853) adds one, of its own type, with its own env under the
  id ``tau_bench``; then ``environment.skyrl_gym.tau_bench`` is SkyRL's
  section, untouched, and this project's env is configured under
  ``tau_bench_env`` (:data:`SKYRL_HAS_TAU_BENCH` says which case holds),
- ``on_env_error``: what the generator does when an env raises (``mask``:
  the trajectory scores 0.0 with an all-zero loss mask and is counted;
  ``raise``: the step fails, SkyRL's own behaviour),

a ``trainer.logger`` that defaults to ``console`` (SkyRL's default, ``wandb``,
stops a run without ``WANDB_API_KEY``; ``trainer.logger=wandb`` asks for it),
and a top-level ``reward_pool`` section that starts the named reward pool
before training. So ``TrainConfig.from_cli_overrides([...])`` takes
``environment.skyrl_gym.tau_bench_env.user.kind=replay`` or
``environment.skyrl_gym.skyrl_rewards.pool=vlm_rewards`` with no ``+``.

No ``from __future__ import annotations`` here or in the section classes:
SkyRL's dataclass walker reads ``Field.type`` and needs real classes.
"""

from dataclasses import dataclass, field, fields

from skyrl.train.config import EnvironmentConfig, SkyRLGymConfig, SkyRLTrainConfig, TrainerConfig

from skyrl_rewards.train.env import RewardEnvConfig
from skyrl_rewards.train.tau_bench_config import TauBenchEnvConfig

ON_ENV_ERROR = ("mask", "raise")


@dataclass
class RewardPoolLaunchConfig:
    """The reward pool the entry point starts before training (``reward_pool.*``)."""

    config: str | None = None
    """Pool config (``configs/pool.yaml``, or a bundled config's file name); None starts no pool."""
    rewards: str | None = None
    """A config whose ``rewards`` mapping replaces the pool config's mix (``configs/rec.yaml``)."""
    overrides: list[str] = field(default_factory=list)
    """``key=value`` overrides of the pool config (``num_workers=8``)."""


SKYRL_HAS_TAU_BENCH = any(f.name == "tau_bench" for f in fields(SkyRLGymConfig))
"""Whether the installed SkyRL configures an env of its own under ``environment.skyrl_gym.tau_bench``."""


@dataclass
class _ProjectGymSections(SkyRLGymConfig):
    """SkyRL's ``environment.skyrl_gym`` plus the sections this project always adds."""

    skyrl_rewards: RewardEnvConfig = field(default_factory=RewardEnvConfig)
    """``env_config`` of the ``skyrl_rewards`` env."""
    tau_bench_env: TauBenchEnvConfig = field(default_factory=TauBenchEnvConfig)
    """``env_config`` of the ``tau_bench_env`` env."""
    on_env_error: str = "mask"
    """``mask`` (an env that raises ends its trajectory, masked and counted) or ``raise``."""

    def __post_init__(self) -> None:
        if self.on_env_error not in ON_ENV_ERROR:
            raise ValueError(
                f"environment.skyrl_gym.on_env_error must be one of {list(ON_ENV_ERROR)}, "
                f"got {self.on_env_error!r}"
            )


if SKYRL_HAS_TAU_BENCH:

    @dataclass
    class RewardsSkyRLGymConfig(_ProjectGymSections):
        """SkyRL's ``environment.skyrl_gym`` (its ``tau_bench`` included) plus this project's."""

else:

    @dataclass
    class RewardsSkyRLGymConfig(_ProjectGymSections):
        """SkyRL's ``environment.skyrl_gym`` plus this project's sections, the alias's included."""

        tau_bench: TauBenchEnvConfig = field(default_factory=TauBenchEnvConfig)
        """``env_config`` of this project's env under the alias id ``tau_bench``."""


@dataclass
class RewardsEnvironmentConfig(EnvironmentConfig):
    """SkyRL's ``environment`` section with :class:`RewardsSkyRLGymConfig`."""

    skyrl_gym: RewardsSkyRLGymConfig = field(default_factory=RewardsSkyRLGymConfig)


@dataclass
class ConsoleTrainerConfig(TrainerConfig):
    """SkyRL's ``trainer`` section, logging to the console unless told otherwise."""

    logger: str = "console"
    """``console`` by default: runs on a machine without W&B; ``wandb``, ``mlflow``,
    ``swanlab`` or ``tensorboard`` as SkyRL offers."""


@dataclass
class TrainConfig(SkyRLTrainConfig):
    """SkyRL's training config with this project's sections (see the module docstring).

    >>> cfg = TrainConfig.from_cli_overrides(["environment.skyrl_gym.tau_bench_env.user.kind=replay"])
    >>> cfg.environment.skyrl_gym.tau_bench_env.user.kind, cfg.trainer.logger
    ('replay', 'console')
    """

    trainer: ConsoleTrainerConfig = field(default_factory=ConsoleTrainerConfig)
    environment: RewardsEnvironmentConfig = field(default_factory=RewardsEnvironmentConfig)
    reward_pool: RewardPoolLaunchConfig = field(default_factory=RewardPoolLaunchConfig)
