"""Registry: config names to reward components and to TRL-style batch reward functions.

Names: ``accuracy``, ``iou``, ``detection``, ``coco_map`` (COCO AP, one of
VLM-R1's mAP methods for every row), ``length`` (cosine shaping with the
accuracy it depends on), ``repetition``, ``format``, ``format_rec``,
``giou`` (GIoU or IoU² of one box), ``boxes_matched`` (Hungarian matching of many
boxes), ``gui_action`` (GUI-R1's action accuracy), ``gui_point`` (GUI-G2's Gaussian
grounding), ``count`` (the stated number against the count), ``ocr`` (1 - CER or
1 - WER), ``anls`` (DocVQA's ANLS), ``judge`` (a chat-model judge, :mod:`~skyrl_rewards.rewards.models.judge`),
``reward_model`` (a sequence-classification reward model, see
:mod:`~skyrl_rewards.rewards.models.reward_model_component`).

:data:`COMPONENTS` is the explicit table: each family folder (``text``, ``boxes``, ``gui``,
``documents``, ``models``) keeps its components beside the scoring they wrap, and this
module collects them by name. A new reward is one module (or one class) in its family's
folder and one line here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from skyrl_rewards.rewards.accuracy import Accuracy, Length
from skyrl_rewards.rewards.boxes.box_matching import BoxesMatched
from skyrl_rewards.rewards.boxes.coco_map import CocoMap
from skyrl_rewards.rewards.boxes.detection import DetectionReward
from skyrl_rewards.rewards.boxes.giou import Giou
from skyrl_rewards.rewards.boxes.rec import Iou
from skyrl_rewards.rewards.contract.component_base import Component
from skyrl_rewards.rewards.documents.counting import Count
from skyrl_rewards.rewards.documents.ocr import Anls, Ocr
from skyrl_rewards.rewards.gui.gui import GuiAction, GuiPoint
from skyrl_rewards.rewards.models.judge import Judge
from skyrl_rewards.rewards.models.reward_model_component import RewardModel
from skyrl_rewards.rewards.text.format_checks import Format, FormatRec
from skyrl_rewards.rewards.text.shaping import Repetition
from skyrl_rewards.suggest import did_you_mean

COMPONENTS: dict[str, type[Component]] = {
    "accuracy": Accuracy,
    "iou": Iou,
    "detection": DetectionReward,
    "coco_map": CocoMap,
    "length": Length,
    "repetition": Repetition,
    "format": Format,
    "format_rec": FormatRec,
    "giou": Giou,
    "boxes_matched": BoxesMatched,
    "gui_action": GuiAction,
    "gui_point": GuiPoint,
    "count": Count,
    "ocr": Ocr,
    "anls": Anls,
    "judge": Judge,
    "reward_model": RewardModel,
}


def build_component(name: str, params: Mapping[str, Any] | None = None) -> Component:
    """The component registered as ``name``, built with ``params``.

    Raises ``ValueError`` naming the reward for an unknown name or parameter.

    >>> build_component("format").name
    'format'
    """
    if name not in COMPONENTS:
        raise ValueError(
            f"rewards.{name}: unknown reward{did_you_mean(name, COMPONENTS)}; "
            f"registered rewards: {', '.join(COMPONENTS)}"
        )
    component = COMPONENTS[name]
    signature = inspect.signature(component).parameters.values()
    forwarded = component.forwarded_params
    open_ended = not forwarded and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature)
    named = [p.name for p in signature if p.kind is not inspect.Parameter.VAR_KEYWORD]
    known = ["weight", *named, *(k for k in forwarded if k not in named)]
    for key in () if open_ended else params or {}:  # open-ended: the component checks its own
        if key not in known:
            raise ValueError(
                f"rewards.{name}.{key}: unknown parameter{did_you_mean(str(key), known)}; "
                f"parameters of {name}: {', '.join(known)}"
            )
    try:
        return COMPONENTS[name](**dict(params or {}))
    except TypeError as error:
        raise ValueError(f"rewards.{name}: bad parameters {dict(params or {})}: {error}") from error
    except ValueError as error:
        raise ValueError(f"rewards.{name}: {error}") from error
