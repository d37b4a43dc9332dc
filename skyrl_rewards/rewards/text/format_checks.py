"""Format rewards: the think/answer layout, and the REC layout with a box in the answer."""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from typing import Any

from skyrl_rewards.rewards.contract.component_base import Component
from skyrl_rewards.rewards.contract.debug_log import log_rewards
from skyrl_rewards.rewards.contract.result import ComponentScore
from skyrl_rewards.rewards.contract.text import completion_text
from skyrl_rewards.rewards.geometry.box_formats import RELATIVE_1, BoxComponent

_THINK_ANSWER = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)
_THINK_CLOSE_ANSWER = re.compile(r"</think>\s*<answer>")
_INT_BOX = re.compile(r"\[\d+,\s*\d+,\s*\d+,\s*\d+\]")
_DECIMAL = r"\d+(?:\.\d+)?"
_DECIMAL_BOX = re.compile(r"\[" + r",\s*".join([_DECIMAL] * 4) + r"\]")


def has_think_answer_format(content: str) -> bool:
    """True when ``content`` is exactly ``<think>...</think>``, whitespace, ``<answer>...</answer>``.

    Content with more than one ``<think>`` or ``<answer>`` is rejected (the
    reference regex pays for chained think/answer pairs).

    >>> has_think_answer_format("<think>x</think> <answer>1</answer>")
    True
    """
    if content.count("<think>") != 1 or content.count("<answer>") != 1:
        return False
    return _THINK_ANSWER.fullmatch(content) is not None


def has_rec_format(content: str, *, decimals: bool = False) -> bool:
    """True when ``content`` contains a think block, then an answer block holding ``{ ... [n, n, n, n] ... }``.

    Same acceptance as VLM-R1's ``<think>.*?</think>\\s*<answer>.*?\\{.*\\[\\d+,
    \\s*\\d+,\\s*\\d+,\\s*\\d+\\].*\\}.*?</answer>`` searched with DOTALL, in
    linear time. With ``decimals`` the four numbers may have a fractional part
    (boxes in 0-1 fractions, box format ``relative_1``).

    >>> has_rec_format('<think>x</think><answer>{"bbox": [1, 2, 3, 4]}</answer>')
    True
    """
    first_think = content.find("<think>")
    if first_think == -1:
        return False
    # The earliest "</think> <answer>" leaves the most room for the rest.
    opening = _THINK_CLOSE_ANSWER.search(content, first_think + len("<think>"))
    answer_end = content.rfind("</answer>")
    if opening is None or answer_end < opening.end():
        return False
    brace = content.find("{", opening.end(), answer_end)
    if brace == -1:
        return False
    box = (_DECIMAL_BOX if decimals else _INT_BOX).search(content, brace + 1, answer_end)
    return box is not None and content.find("}", box.end(), answer_end) != -1


def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 per completion in the exact think/answer format, else 0.0 (see :func:`has_think_answer_format`).

    >>> format_reward(["<think>a</think><answer>b</answer>", "b"])
    [1.0, 0.0]
    """
    contents = [completion_text(c) for c in completions]
    rewards = [1.0 if has_think_answer_format(c) else 0.0 for c in contents]
    log_rewards("format_reward", contents, rewards)
    return rewards


def format_reward_rec(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 per completion that contains the REC layout, else 0.0 (see :func:`has_rec_format`).

    ``box_format`` (the reward's, a string, or a column of each row's):
    where it is ``relative_1`` the box's numbers may have decimals.
    """
    contents = [completion_text(c) for c in completions]
    formats = kwargs.get("box_format")
    if not isinstance(formats, (list, tuple)) or len(formats) != len(contents):
        formats = [formats] * len(contents)
    rewards = [
        1.0 if has_rec_format(c, decimals=f == RELATIVE_1) else 0.0
        for c, f in zip(contents, formats, strict=True)
    ]
    log_rewards("format_reward_rec", contents, rewards)
    return rewards


class Format(Component):
    """Exact think/answer format, 1.0 or 0.0."""

    name = "format"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return ComponentScore(1.0 if has_think_answer_format(content) else 0.0)


class FormatRec(BoxComponent):
    """REC format (think block, then an answer holding a box), 1.0 or 0.0.

    The box is four integers, as VLM-R1 asks; four numbers with decimals
    when the row's box format is ``relative_1`` (0-1 fractions).
    """

    name = "format_rec"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        decimals = self.box_format.for_row(sample).coords == RELATIVE_1
        return ComponentScore(1.0 if has_rec_format(content, decimals=decimals) else 0.0)

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return None  # a regex over the text: cheaper to score again than to key
