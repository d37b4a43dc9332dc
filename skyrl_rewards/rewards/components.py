"""Reward components: one reward with its parameters, applied to one sample.

A component is built once (parameters checked, heavy state such as a
tokenizer loaded) and then scores samples. A *sample* is a mapping with
``completion`` (str or message list), ``solution`` and this row's dataset
columns. :meth:`Component.score` never raises: dataset and code errors become
a :class:`ComponentScore` with status ``error``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from skyrl_rewards.rewards.accuracy import ACCURACY_METHODS, LLM_NEEDS_JUDGE, accuracy_score
from skyrl_rewards.rewards.box_formats import (
    BOX_FORMAT_COLUMN,
    IMAGE_RESIZE_COLUMN,
    ORIGINAL,
    RELATIVE_1,
    BoxFormatChoice,
    row_converter,
)
from skyrl_rewards.rewards.box_matching import (
    boxes_matched_sample_score,
    check_confidence_weight,
    check_iou_threshold,
)
from skyrl_rewards.rewards.coco_map import MAP_METHODS, coco_map_score
from skyrl_rewards.rewards.component_base import Component, work_digest
from skyrl_rewards.rewards.counting import check_tolerance, count_score
from skyrl_rewards.rewards.detection import (
    check_threshold,
    check_weights,
    detection_score_with_status,
)
from skyrl_rewards.rewards.format_checks import has_rec_format, has_think_answer_format
from skyrl_rewards.rewards.geometry import Box
from skyrl_rewards.rewards.giou import check_giou_mode, giou_sample_score
from skyrl_rewards.rewards.gui import (
    DEFAULT_F1_THRESHOLD,
    DEFAULT_RADIUS_PX,
    DEFAULT_SIGMA_SCALE,
    GuiActionParams,
    GuiPointParams,
    gui_action_score,
    gui_point_score,
    target_box,
)
from skyrl_rewards.rewards.gui_actions import target_action
from skyrl_rewards.rewards.hub import load_pretrained_tokenizer
from skyrl_rewards.rewards.math_check import DEFAULT_TIMEOUT_S, MathGuard
from skyrl_rewards.rewards.models.lanes import JUDGE_LANE, ModelOutcome, ModelRequest
from skyrl_rewards.rewards.ocr import (
    DEFAULT_ANLS_THRESHOLD,
    anls_score,
    check_anls_rules,
    check_anls_threshold,
    check_metric,
    ocr_score,
)
from skyrl_rewards.rewards.rec import BOX_FORMAT_PARAMS, iou_sample_score
from skyrl_rewards.rewards.relaxed_accuracy import (
    DEFAULT_MAX_RELATIVE_CHANGE,
    check_max_relative_change,
    relaxed_accuracy_score,
)
from skyrl_rewards.rewards.result import ComponentScore
from skyrl_rewards.rewards.shaping import (
    CosineSchedule,
    Tokenizer,
    cosine_reward,
    repetition_reward,
)
from skyrl_rewards.rewards.text import answer_span, completion_text
from skyrl_rewards.rewards.vqa_accuracy import vqa_accuracy_score


def sample_solution(sample: Mapping[str, Any]) -> Any:
    """The sample's ground truth; ``ValueError`` when the row has none."""
    if "solution" not in sample or sample["solution"] is None:
        raise ValueError("solution: missing from the row")
    return sample["solution"]


class Accuracy(Component):
    """Answer accuracy, dispatched on the row's ``accu_reward_method`` (default: ``default``).

    Rows whose method is ``llm`` are scored by a chat-model judge (``judge``:
    the parameters of a :class:`~skyrl_rewards.rewards.models.judge.Judge`,
    whose template defaults to VLM-R1's ``llm`` prompt and parser to
    ``binary``) through the judge lane; without ``judge`` such a row is a
    configuration error (masked), never a string comparison.
    """

    name = "accuracy"

    def __init__(
        self,
        math_guard: MathGuard | None = None,
        math_timeout_s: float = DEFAULT_TIMEOUT_S,
        judge: Mapping[str, Any] | None = None,
    ) -> None:
        if math_guard not in (None, "subprocess", "inline"):
            raise ValueError(f"math_guard: expected 'subprocess' or 'inline', got {math_guard!r}")
        if not isinstance(math_timeout_s, (int, float)) or math_timeout_s <= 0:
            raise ValueError(f"math_timeout_s: expected a positive number, got {math_timeout_s!r}")
        self.math_guard = math_guard
        self.math_timeout_s = float(math_timeout_s)
        self.judge: Component | None = None
        if judge is not None:
            if not isinstance(judge, Mapping):
                raise ValueError(f"judge: expected the judge's parameters, got {judge!r:.80}")
            from skyrl_rewards.rewards.models.judge import Judge

            try:
                self.judge = Judge(**judge)
            except TypeError as error:
                raise ValueError(f"judge: bad parameters: {error}") from error
            except ValueError as error:
                raise ValueError(f"judge.{error}") from error

    def _judged(self, sample: Mapping[str, Any]) -> bool:
        return self.judge is not None and sample.get("accu_reward_method") == "llm"

    def lanes(self) -> frozenset[str]:
        return frozenset({JUDGE_LANE}) if self.judge is not None else frozenset()

    def lane(self, sample: Mapping[str, Any]) -> str | None:
        return JUDGE_LANE if self._judged(sample) else None

    def lane_request(self, sample: Mapping[str, Any]) -> ModelRequest:
        if self.judge is None:
            raise ValueError(LLM_NEEDS_JUDGE)
        return self.judge.lane_request(sample)

    def settle(self, request: ModelRequest, outcome: ModelOutcome) -> ComponentScore:
        if self.judge is None:
            raise ValueError(LLM_NEEDS_JUDGE)
        return self.judge.settle(request, outcome)

    def endpoints(self) -> dict[str, dict[str, Any]]:
        return self.judge.endpoints() if self.judge is not None else {}

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        method = sample.get("accu_reward_method")
        if method is not None and method not in ACCURACY_METHODS:
            raise ValueError(
                f"accu_reward_method: unknown method {method!r}; expected one of {ACCURACY_METHODS}"
            )
        return accuracy_score(
            content,
            sample_solution(sample),
            method,
            guard=self.math_guard,
            timeout_s=self.math_timeout_s,
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        if self._judged(sample):
            return self.judge.work_key(sample)  # type: ignore[union-attr]
        solution = sample.get("solution")
        if not isinstance(solution, str):
            return None
        method = sample.get("accu_reward_method")
        content = completion_text(sample.get("completion"))
        if method not in MAP_METHODS:  # these read more: map the whole text, od_* the answer tag
            content = answer_span(content)
        return work_digest(self.name, repr(method), solution, content)


class BoxComponent(Component):
    """A reward that reads boxes: its box format (:mod:`~skyrl_rewards.rewards.box_formats`).

    Box parameters: ``box_format`` (a family or generic name; default
    :attr:`default_box_format`), the processor's ``min_pixels``,
    ``max_pixels``, ``patch_size`` and ``merge_size`` (resized-pixel formats),
    and the former ``box_coords``. A row's ``box_format`` column wins over
    the reward's.
    """

    default_box_format = "qwen2_5_vl"
    forwarded_params = BOX_FORMAT_PARAMS

    def __init__(
        self,
        *,
        box_format: str | None = None,
        box_coords: str | None = None,
        patch_size: int | None = None,
        merge_size: int | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
    ) -> None:
        self.box_format: BoxFormatChoice = BoxFormatChoice.build(
            box_format,
            box_coords=box_coords,
            default=self.default_box_format,
            patch_size=patch_size,
            merge_size=merge_size,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
        )

    def converter(self, sample: Mapping[str, Any]) -> Callable[[Box], Box] | None:
        """The row's map from its format to original pixels (``None``: as written; see ``row_converter``)."""
        return row_converter(sample, self.box_format.for_row(sample))

    def box_work_key(self, sample: Mapping[str, Any], *parts: str) -> Hashable | None:
        """A work key over ``parts`` plus what the conversion reads; ``None`` for in-memory images."""
        if self.box_format.for_row(sample).coords == ORIGINAL:
            return work_digest(self.name, *parts)
        if any(sample.get(k) is not None for k in ("image", "images")):
            return None  # an in-memory image has no stable key
        return work_digest(
            self.name,
            *parts,
            repr(sample.get("image_path")),
            repr(sample.get("image_grid_thw")),
            repr(sample.get(IMAGE_RESIZE_COLUMN)),
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        """Solution, answer span and what the conversion reads (rewards that read the answer span)."""
        solution = sample.get("solution")
        if isinstance(solution, (list, tuple)):  # a list column (GUI-G2's abs_box)
            solution = repr(list(solution))
        if not isinstance(solution, str):
            return None
        content = answer_span(completion_text(sample.get("completion")))
        return self.box_work_key(sample, repr(sample.get(BOX_FORMAT_COLUMN)), solution, content)


class CocoMap(BoxComponent):
    """COCO AP of the predicted boxes with one of VLM-R1's mAP methods, whatever the row's column.

    ``method``: ``map`` (default; the last JSON block of the whole completion),
    ``od_ap``, ``od_ap50`` or ``odLength`` (the ``<answer>`` span); see
    :mod:`skyrl_rewards.rewards.coco_map`. Boxes as written by default
    (``box_format="original"``, as VLM-R1); another format converts the
    predicted boxes to the row's original pixels first.
    """

    name = "coco_map"
    default_box_format = ORIGINAL

    def __init__(self, method: str = "map", **box_params: Any) -> None:
        if method not in MAP_METHODS:
            raise ValueError(f"method: expected one of {MAP_METHODS}, got {method!r}")
        self.method = method
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        solution = sample_solution(sample)
        return coco_map_score(content, solution, self.method, convert=self.converter(sample))

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        solution = sample.get("solution")
        if not isinstance(solution, str):
            return None
        content = completion_text(sample.get("completion"))
        return self.box_work_key(
            sample, self.method, repr(sample.get(BOX_FORMAT_COLUMN)), solution, content
        )


class Iou(BoxComponent):
    """REC IoU of the predicted box, converted from the row's box format (see rec, box_formats)."""

    name = "iou"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return iou_sample_score(content, sample_solution(sample), sample, self.box_format)


class Detection(BoxComponent):
    """Detection score with its threshold and weights.

    ``box_format="original"`` (default, as VLM-R1) compares boxes as written;
    another format (``qwen2_5_vl``, ``qwen3_vl``, ...) converts the predicted
    boxes to the row's original pixels first, like ``iou`` (a row without the
    image the format needs is a dataset error then).
    """

    name = "detection"
    default_box_format = ORIGINAL

    def __init__(
        self,
        iou_threshold: float = 0.5,
        alpha: float = 0.7,
        beta: float = 0.0,
        gamma: float = 0.3,
        **box_params: Any,
    ) -> None:
        check_weights(alpha, beta, gamma)
        check_threshold(iou_threshold)
        self.params = {"iou_threshold": iou_threshold, "alpha": alpha, "beta": beta, "gamma": gamma}
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        solution = sample_solution(sample)
        fmt = self.box_format.for_row(sample)
        convert = self.converter(sample)
        if convert is None and fmt.coords != ORIGINAL:
            raise ValueError(
                f"image_path: missing; box_format {fmt.name!r} needs the row's image to convert "
                "the predicted boxes to its pixels"
            )
        return detection_score_with_status(content, solution, **self.params, scale=convert)


class Giou(BoxComponent):
    """REC overlap of the predicted box shaped by ``mode`` (see :mod:`~skyrl_rewards.rewards.giou`).

    ``giou`` (NeMo-RL, [-1, 1]), ``giou_unit`` ((GIoU + 1) / 2) or
    ``iou_squared`` (Perception-R1). Continuous coordinates; the box converted
    from the row's box format like ``iou`` (default ``qwen2_5_vl``).
    """

    name = "giou"

    def __init__(self, mode: str = "giou", **box_params: Any) -> None:
        self.mode = check_giou_mode(mode)
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        solution = sample_solution(sample)
        return giou_sample_score(content, solution, sample, self.box_format, self.mode)


class BoxesMatched(BoxComponent):
    """Hungarian matching of many predicted boxes to the gold ones (:mod:`~skyrl_rewards.rewards.box_matching`).

    ``match_labels`` (default True), ``iou_threshold`` (default 0.0: any
    overlap counts; 0.5 is Visual-RFT's), ``confidence_weight`` (default 0.0:
    off; 1.0 averages in Visual-RFT's confidence reward). Boxes as written by
    default (``box_format="original"``, like ``detection``); another format
    converts the predicted boxes with the row's image.
    """

    name = "boxes_matched"
    default_box_format = ORIGINAL

    def __init__(
        self,
        match_labels: bool = True,
        iou_threshold: float = 0.0,
        confidence_weight: float = 0.0,
        **box_params: Any,
    ) -> None:
        if not isinstance(match_labels, bool):
            raise ValueError(f"match_labels: expected true or false, got {match_labels!r:.80}")
        self.params = {
            "match_labels": match_labels,
            "iou_threshold": check_iou_threshold(iou_threshold),
            "confidence_weight": check_confidence_weight(confidence_weight),
        }
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return boxes_matched_sample_score(
            content, sample_solution(sample), sample, self.box_format, **self.params
        )


class GuiAction(BoxComponent):
    """GUI-R1's action accuracy (:mod:`~skyrl_rewards.rewards.gui`), points converted from the row's box format.

    Parameters: ``radius_px`` (140: hit radius around a target point, in
    original pixels), ``f1_threshold`` (0.5), ``substring_match`` (False:
    GUI-R1's one-word substring rule), ``type_credit`` (0.0: the value of a
    right type with a wrong argument), and the box parameters. Only rows whose
    ground truth is a point action read the image.
    """

    name = "gui_action"

    def __init__(
        self,
        radius_px: float = DEFAULT_RADIUS_PX,
        f1_threshold: float = DEFAULT_F1_THRESHOLD,
        substring_match: bool = False,
        type_credit: float = 0.0,
        **box_params: Any,
    ) -> None:
        self.params = GuiActionParams(radius_px, f1_threshold, substring_match, type_credit)
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        target = target_action(sample_solution(sample))
        convert = self.converter(sample) if target.is_located else None
        return gui_action_score(content, target, self.params, convert=convert)


class GuiPoint(BoxComponent):
    """GUI-G2's Gaussian grounding reward (:mod:`~skyrl_rewards.rewards.gui`), ``form`` point or plane.

    Parameters: ``form`` (``point``: the Gaussian at the predicted point or a
    box's centre; ``plane``: exp(-Bhattacharyya distance) of the predicted
    box's Gaussian and the target's; ``both``: their sum, GUI-G2's recipe),
    ``sigma_scale`` (0.5: GUI-G2's alpha), and the box parameters. The
    solution may be a list (GUI-G2's ``abs_box``).
    """

    name = "gui_point"

    def __init__(
        self, form: str = "point", sigma_scale: float = DEFAULT_SIGMA_SCALE, **box_params: Any
    ) -> None:
        self.params = GuiPointParams(form, sigma_scale)
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        box = target_box(sample_solution(sample))
        return gui_point_score(content, box, self.params, convert=self.converter(sample))


class WordTokenizer:
    """A tokenizer-free length: words and punctuation marks count one token each."""

    _TOKEN = re.compile(r"\w+|[^\w\s]")

    def encode(self, text: str) -> list[str]:
        """The word and punctuation tokens of ``text``."""
        return self._TOKEN.findall(text)


def load_tokenizer(tokenizer: Any) -> Tokenizer:
    """``None`` -> :class:`WordTokenizer`; a folder or hub name -> its tokenizer (see ``hub``); else as given.

    A hub name that is not cached and cannot be reached fails at once with the
    fix (pass a local folder), not after ``transformers``' network retries.
    """
    if tokenizer is None:
        return WordTokenizer()
    if isinstance(tokenizer, str):
        return load_pretrained_tokenizer(tokenizer)
    if not callable(getattr(tokenizer, "encode", None)):
        raise ValueError(
            f"tokenizer: expected a name, a path or an object with encode(), got {tokenizer!r:.80}"
        )
    return tokenizer


class Length(Component):
    """Cosine length shaping driven by this sample's accuracy."""

    name = "length"

    def __init__(
        self,
        tokenizer: Any = None,
        math_guard: MathGuard | None = None,
        math_timeout_s: float = DEFAULT_TIMEOUT_S,
        **schedule: Any,
    ) -> None:
        self.tokenizer = load_tokenizer(tokenizer)
        try:
            self.schedule = CosineSchedule(**schedule)
        except TypeError as error:
            raise ValueError(f"length: unknown parameter ({error})") from error
        self.accuracy = Accuracy(math_guard, math_timeout_s)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        if sample.get("accu_reward_method") == "llm":
            raise ValueError(
                "length: accu_reward_method 'llm' is not supported (the length shaping needs its "
                "accuracy in the same step; a judged accuracy runs in the judge lane); use another "
                "method for these rows, or the accuracy reward with a judge and no length reward"
            )
        accuracy = self.accuracy.compute(content, sample)
        value = cosine_reward(content, self.tokenizer, accuracy.value, schedule=self.schedule)
        return ComponentScore(value, accuracy.status, accuracy.error)


class Repetition(Component):
    """Repetition penalty in [-1, 0]."""

    name = "repetition"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return ComponentScore(repetition_reward(content))


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


class Count(Component):
    """Counting: 1.0 when the last number of the answer span is the row's count (see counting).

    ``tolerance`` (absolute) and ``relative_tolerance`` (a fraction of the
    count) widen "equal"; both default to 0 (exact).
    """

    name = "count"

    def __init__(self, tolerance: float = 0.0, relative_tolerance: float = 0.0) -> None:
        self.tolerance = check_tolerance("tolerance", tolerance)
        self.relative_tolerance = check_tolerance("relative_tolerance", relative_tolerance)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return count_score(
            content,
            sample_solution(sample),
            tolerance=self.tolerance,
            relative_tolerance=self.relative_tolerance,
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return _answer_work_key(self.name, sample)


class Ocr(Component):
    """1 - CER (``metric="cer"``, default) or 1 - WER of the answer span (see ocr).

    ``lowercase`` (default False) and ``collapse_whitespace`` (default True)
    normalise both texts first.
    """

    name = "ocr"

    def __init__(
        self, metric: str = "cer", lowercase: bool = False, collapse_whitespace: bool = True
    ) -> None:
        self.metric = check_metric(metric)
        for key, value in (("lowercase", lowercase), ("collapse_whitespace", collapse_whitespace)):
            if not isinstance(value, bool):
                raise ValueError(f"{key}: expected true or false, got {value!r:.80}")
        self.lowercase = lowercase
        self.collapse_whitespace = collapse_whitespace

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return ocr_score(
            content,
            sample_solution(sample),
            metric=self.metric,
            lowercase=self.lowercase,
            collapse_whitespace=self.collapse_whitespace,
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return _answer_work_key(self.name, sample)


class Anls(Component):
    """ANLS against the row's gold answers (one, or a JSON list; see ocr), ``threshold`` 0.5.

    ``rules``: ``official`` (the DocVQA / RRC script, default) or ``normalized``.
    """

    name = "anls"

    def __init__(self, threshold: float = DEFAULT_ANLS_THRESHOLD, rules: str = "official") -> None:
        self.threshold = check_anls_threshold(threshold)
        self.rules = check_anls_rules(rules)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return anls_score(
            content, sample_solution(sample), threshold=self.threshold, rules=self.rules
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return _answer_work_key(self.name, sample)


class RelaxedAccuracy(Component):
    """ChartQA's relaxed accuracy of the answer span (see relaxed_accuracy), ``max_relative_change`` 0.05."""

    name = "relaxed_accuracy"

    def __init__(self, max_relative_change: float = DEFAULT_MAX_RELATIVE_CHANGE) -> None:
        self.max_relative_change = check_max_relative_change(max_relative_change)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return relaxed_accuracy_score(
            content, sample_solution(sample), max_relative_change=self.max_relative_change
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return _answer_work_key(self.name, sample)


class VqaAccuracy(Component):
    """VQAv2's accuracy of the answer span against the row's gold answers (see vqa_accuracy)."""

    name = "vqa_accuracy"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return vqa_accuracy_score(content, sample_solution(sample))

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return _answer_work_key(self.name, sample)


def _answer_work_key(name: str, sample: Mapping[str, Any]) -> Hashable | None:
    """A key over the solution and the answer span (a component keyed so reads nothing else)."""
    solution = sample.get("solution")
    if not isinstance(solution, str):
        return None
    return work_digest(name, solution, answer_span(completion_text(sample.get("completion"))))
