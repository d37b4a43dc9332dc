"""Batch reward functions in the TRL / VLM-R1 convention, for ``GRPOTrainer(reward_funcs=...)``.

A batch reward takes ``completions`` (message lists or strings), ``solution``
and dataset columns as keyword lists, and returns one float per completion.
A bad row raises ``ValueError`` naming the field and the sample index; what
a model wrote never raises; a bug in our code raises as itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.components import Component
from skyrl_rewards.rewards.debug_log import log_rewards
from skyrl_rewards.rewards.registry import build_component
from skyrl_rewards.rewards.text import completion_text


class BatchReward:
    """A registry component as a picklable TRL reward function named ``__name__``.

    >>> reward = make_reward("format")
    >>> reward(["<think>a</think><answer>b</answer>"], solution=["b"])
    [1.0]
    >>> reward.__name__
    'format_reward'
    """

    def __init__(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.params = dict(params or {})
        self.__name__ = f"{name}_reward"
        self._component: Component = build_component(name, self.params)

    def __reduce__(self) -> tuple[Any, ...]:
        return (BatchReward, (self.name, self.params))

    def __call__(
        self, completions: Sequence[Any], solution: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float]:
        rewards = []
        contents = [completion_text(c) for c in completions]
        for index, content in enumerate(contents):
            sample = {key: _row(values, key, index) for key, values in kwargs.items()}
            sample["solution"] = _row(solution, "solution", index) if solution is not None else None
            try:
                rewards.append(self._component.compute(content, sample).value)
            except ValueError as error:
                raise ValueError(f"sample {index}: {error}") from error
        log_rewards(self.__name__, contents, rewards)
        return rewards


def _row(values: Any, key: str, index: int) -> Any:
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__getitem__"):
        return values  # a scalar passed for the whole batch (e.g. a tokenizer)
    try:
        return values[index]
    except (IndexError, KeyError, TypeError) as error:
        raise ValueError(f"sample {index}: {key}: column has no value for this sample") from error


def make_reward(name: str, **params: Any) -> BatchReward:
    """The batch reward for registry ``name`` with ``params`` (checked now, raising ``ValueError``)."""
    return BatchReward(name, params)


accuracy_reward = make_reward("accuracy")
"""Accuracy per row, dispatched on the ``accu_reward_method`` column (default, mcq, yes_no, ...)."""

detection_reward = make_reward("detection")
"""Detection score per row, with the default threshold and weights."""

repetition_batch_reward = make_reward("repetition")
"""Repetition penalty per completion."""
