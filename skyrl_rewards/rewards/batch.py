"""Batch reward functions in the TRL / VLM-R1 convention, for ``GRPOTrainer(reward_funcs=...)``.

A batch reward takes ``completions`` (any form TRL produces: see
:func:`~skyrl_rewards.rewards.contract.text.completion_text`), ``solution`` and dataset
columns as keyword lists, and returns one value per completion: a float, or
``None`` for a row that cannot be scored (a dataset error such as a missing
image, or a timeout), which TRL leaves out of training. Such rows are warned
about once per cause and counted through TRL's ``log_metric``; with
``on_error="raise"`` (or ``SKYRL_REWARDS_ON_ERROR=raise``) the first one raises
instead (see :mod:`skyrl_rewards.rewards.contract.masking`). What a model wrote never
raises; a bug in our code raises as itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.contract.component_base import Component
from skyrl_rewards.rewards.contract.debug_log import log_rewards
from skyrl_rewards.rewards.contract.lanes import ModelRequest
from skyrl_rewards.rewards.contract.masking import MaskedRows, check_on_error
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import completion_text
from skyrl_rewards.rewards.models.local import run_requests
from skyrl_rewards.rewards.registry import build_component

_TRL_ARGUMENTS = frozenset(
    {"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)
"""Keyword arguments TRL passes that are not dataset columns."""


class BatchReward:
    """A registry component as a picklable TRL reward function named ``__name__``.

    >>> reward = make_reward("format")
    >>> reward(["<think>a</think><answer>b</answer>"], solution=["b"])
    [1.0]
    >>> reward.__name__
    'format_reward'
    """

    def __init__(
        self, name: str, params: Mapping[str, Any] | None = None, on_error: str | None = None
    ) -> None:
        self.name = name
        self.params = dict(params or {})
        self.on_error = check_on_error(on_error)
        self.__name__ = f"{name}_reward"
        self._component: Component = build_component(name, self.params)
        self._masked = MaskedRows(self.__name__)

    def __reduce__(self) -> tuple[Any, ...]:
        return (BatchReward, (self.name, self.params, self.on_error))

    def __call__(
        self, completions: Sequence[Any], solution: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        log_metric = kwargs.get("log_metric")
        columns = {key: values for key, values in kwargs.items() if key not in _TRL_ARGUMENTS}
        if "prompt" not in columns and kwargs.get("prompts") is not None:
            columns["prompt"] = kwargs["prompts"]  # TRL passes the prompt column as `prompts`
        contents = [completion_text(c) for c in completions]
        scores = [
            self._score(index, content, solution, columns) for index, content in enumerate(contents)
        ]
        self._run_model_requests(scores)
        rewards = self._masked.values(scores, on_error=self.on_error, log_metric=log_metric)
        log_rewards(self.__name__, contents, rewards)
        return rewards

    def _score(
        self, index: int, content: str, solution: Sequence[Any] | None, columns: Mapping[str, Any]
    ) -> ComponentScore | ModelRequest:
        """The row's score, or the model request that will give it (see ``_run_model_requests``)."""
        try:
            sample = {key: _row(values, key, index) for key, values in columns.items()}
            sample["solution"] = _row(solution, "solution", index) if solution is not None else None
            if self._component.lane(sample) is not None:
                sample["completion"] = content
                return self._component.lane_request(sample)
            return self._component.compute(content, sample)
        except ValueError as error:
            return ComponentScore(0.0, Status.ERROR, str(error))

    def _run_model_requests(self, scores: list[ComponentScore | ModelRequest]) -> None:
        """Replace every model request in ``scores`` by its settled score, all run at once."""
        indices = [i for i, score in enumerate(scores) if isinstance(score, ModelRequest)]
        if not indices:
            return
        requests = [scores[i] for i in indices]
        outcomes = run_requests(requests, self._component.endpoints())  # type: ignore[arg-type]
        for index, request, outcome in zip(indices, requests, outcomes, strict=True):
            scores[index] = self._component.settle(request, outcome)  # type: ignore[arg-type]


def _row(values: Any, key: str, index: int) -> Any:
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__getitem__"):
        return values  # a scalar passed for the whole batch (e.g. a tokenizer)
    try:
        return values[index]
    except (IndexError, KeyError, TypeError) as error:
        raise ValueError(f"{key}: column has no value for this sample") from error


def make_reward(name: str, *, on_error: str | None = None, **params: Any) -> BatchReward:
    """The batch reward for registry ``name`` with ``params`` (checked now, raising ``ValueError``).

    ``on_error``: ``"mask"`` (rows that cannot be scored get ``None``) or
    ``"raise"``; ``None`` follows ``$SKYRL_REWARDS_ON_ERROR`` (default mask).

    >>> make_reward("repetition")(["a b c d e f"])
    [0.0]
    """
    return BatchReward(name, params, on_error)


accuracy_reward = make_reward("accuracy")
"""Accuracy per row, dispatched on the ``accu_reward_method`` column (default, mcq, yes_no, ...)."""

detection_reward = make_reward("detection")
"""Detection score per row, with the default threshold and weights."""

repetition_batch_reward = make_reward("repetition")
"""Repetition penalty per completion."""
