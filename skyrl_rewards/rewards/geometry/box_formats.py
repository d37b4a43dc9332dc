"""Box formats by model family: where a policy's box coordinates live, and the way to original pixels.

Every box reward (``iou``, ``detection``, ``coco_map``, ``format_rec``)
compares boxes in original-image pixels, where ground truths are written. A
policy answers in its family's convention, converted here before any IoU:

=====================  ===================================  ==============================
format                 the model's box is in                to original pixels
=====================  ===================================  ==============================
``qwen2_5_vl``,        pixels of the resized input           ``x * W / w_resized``,
``resized_pixels``     (:func:`smart_resize`, factor =       ``y * H / h_resized``
                       patch 14 x merge 2, pixels clamped
                       to ``min_pixels``/``max_pixels``)
``qwen2_vl``,          a 0-1000 grid over the image          ``x * W / 1000``
``qwen3_vl``,
``relative_1000``
``relative_1``         0-1 fractions                         ``x * W``
``original``           original pixels                       as written
=====================  ===================================  ==============================

InternVL2.5 answers on the 0-1000 grid too (``relative_1000``). A reward
clamps relative coordinates to their grid (0-1000 or 0-1) before converting
(:meth:`BoxFormat.clamped`): Qwen3-VL writes 0-999 and at times past 1000
(QwenLM/Qwen3-VL#1741), and a box past the image's edge is the edge. The
row's :class:`~skyrl_rewards.rewards.geometry.converter.BoxConverter` counts
the boxes it clamped, and the reward notes that count on its score
(``ComponentScore.clamped``), so that a pool's ``clamped_boxes`` and
``RewardResult.clamped`` show how often a policy writes past its grid.

For a resized-pixel format the size the model saw comes from the row:

- a row's ``image_grid_thw`` is that size (``grid * patch_size``, as VLM-R1
  reads it) when :func:`smart_resize` gives it for the image under *some*
  pixel bounds (:func:`grid_is_possible`: an engine may run other bounds
  than the reward's); a grid no bounds give for that image is a dataset
  error naming both;
- without a grid, the resize is computed from the image's size and the
  processor's parameters: the row's ``image_resize`` column (written by
  ``prepare_skyrl_data.py``) when it has one, else the reward's (give it the
  engine's ``min_pixels``/``max_pixels``, as ``vllm serve
  --mm-processor-kwargs``).

An image the Qwen-VL processors refuse (aspect ratio past
:data:`MAX_ASPECT_RATIO`) is a dataset error for every answer of a Qwen
family, whatever the answer holds: the policy never saw it. A row may name
its own format in a ``box_format`` column (a dataset that mixes families);
it wins over the reward's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image

from skyrl_rewards.rewards.contract.component_base import Component, work_digest
from skyrl_rewards.rewards.contract.text import answer_span, completion_text
from skyrl_rewards.rewards.geometry.boxes import Box, grid_thw, image_path, image_size
from skyrl_rewards.rewards.geometry.converter import BoxConverter
from skyrl_rewards.suggest import did_you_mean

RESIZED_PIXELS = "resized_pixels"
RELATIVE_1000 = "relative_1000"
RELATIVE_1 = "relative_1"
ORIGINAL = "original"
COORDINATE_SYSTEMS = (RESIZED_PIXELS, RELATIVE_1000, RELATIVE_1, ORIGINAL)
"""Where a format's boxes live; each family is one of these with its processor's parameters."""

QWEN2_VL_MIN_PIXELS = 56 * 56
QWEN2_VL_MAX_PIXELS = 28 * 28 * 16384
"""Qwen2-VL / Qwen2.5-VL processors' published pixel bounds (3,136 and 12,845,056)."""

MAX_ASPECT_RATIO = 200
"""transformers' ``smart_resize`` refuses longer/shorter sides past this ratio (so does vLLM)."""

IMAGE_COLUMNS = ("image_path", "image", "images")
"""Row columns that carry the image whose size boxes are converted to (first found wins)."""

BOX_FORMAT_COLUMN = "box_format"
"""A row's own format, for datasets that mix model families."""

IMAGE_RESIZE_COLUMN = "image_resize"
"""A row's processor settings (``{"min_pixels": .., "max_pixels": .., "patch_size": .., "merge_size": ..}``,
any subset), written by ``prepare_skyrl_data.py``; they win over the reward's for resized-pixel formats."""

PROCESSOR_SETTINGS = ("patch_size", "merge_size", "min_pixels", "max_pixels")
"""The processor settings a resized-pixel format carries (:class:`BoxFormat`'s fields)."""


@dataclass(frozen=True)
class BoxFormat:
    """One box convention: its coordinate system and, for resized pixels, the processor's resize.

    >>> FAMILIES["qwen3_vl"].to_original((0, 0, 500, 1000), (640, 480))
    (0.0, 0.0, 320.0, 480.0)
    """

    name: str
    """The family or generic name it was chosen by (``qwen2_5_vl``, ``relative_1000``, ...)."""
    coords: str
    """One of :data:`COORDINATE_SYSTEMS`."""
    patch_size: int = 14
    """Pixels per vision patch side (Qwen2/2.5-VL 14, Qwen3-VL 16); ``image_grid_thw`` counts these."""
    merge_size: int = 2
    """Patches merged per side into one token; the resize rounds to ``patch_size * merge_size``."""
    min_pixels: int = QWEN2_VL_MIN_PIXELS
    """Fewest pixels of the resized input (the processor's ``min_pixels`` / ``shortest_edge``)."""
    max_pixels: int = QWEN2_VL_MAX_PIXELS
    """Most pixels of the resized input (the processor's ``max_pixels`` / ``longest_edge``)."""
    qwen_processor: bool = False
    """The family's processor resizes with :func:`smart_resize`, so it refuses an aspect past :data:`MAX_ASPECT_RATIO`."""

    @property
    def factor(self) -> int:
        """Multiple each resized side is rounded to."""
        return self.patch_size * self.merge_size

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """``(width, height)`` of the model input for an image of this size (:func:`smart_resize`)."""
        h, w = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return w, h

    def grid(self, width: int, height: int) -> tuple[int, int, int]:
        """The processor's ``image_grid_thw`` of one image of this size: ``(1, h, w)`` in patches."""
        w, h = self.resized(width, height)
        return 1, h // self.patch_size, w // self.patch_size

    def to_original(
        self, box: Box, image_size: tuple[int, int], resized: tuple[int, int] | None = None
    ) -> Box:
        """``box`` in this format, in pixels of an original image of ``(width, height)``.

        ``resized``: the model input's ``(width, height)`` (resized pixels; by
        default :meth:`resized`). Raises ``ValueError`` for an image
        :func:`smart_resize` refuses (resized pixels without ``resized`` only).
        """
        width, height = image_size
        if self.coords == ORIGINAL:
            return box
        if self.coords == RESIZED_PIXELS:
            resized_w, resized_h = resized or self.resized(width, height)
            sx, sy = width / resized_w, height / resized_h
        else:
            unit = self.relative_unit
            sx, sy = width / unit, height / unit
        return box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy

    @property
    def relative_unit(self) -> float:
        """The grid's extent of a relative format (1000 or 1); 0.0 for pixel formats."""
        return {RELATIVE_1000: 1000.0, RELATIVE_1: 1.0}.get(self.coords, 0.0)

    def clamped(self, box: Box) -> Box:
        """A relative box with each coordinate clamped to its grid (``[0, 1000]`` or ``[0, 1]``); others as given.

        >>> FAMILIES["qwen3_vl"].clamped((-3, 10, 1004, 999))
        (0.0, 10, 1000.0, 999)
        """
        unit = self.relative_unit
        if not unit:
            return box
        x1, y1, x2, y2 = (min(unit, max(0.0, coord)) for coord in box)
        return x1, y1, x2, y2


FAMILIES: dict[str, BoxFormat] = {
    "qwen2_5_vl": BoxFormat("qwen2_5_vl", RESIZED_PIXELS, qwen_processor=True),
    "qwen2_vl": BoxFormat("qwen2_vl", RELATIVE_1000, qwen_processor=True),
    "qwen3_vl": BoxFormat(
        "qwen3_vl",
        RELATIVE_1000,
        patch_size=16,
        min_pixels=65_536,
        max_pixels=16_777_216,
        qwen_processor=True,
    ),
    RESIZED_PIXELS: BoxFormat(RESIZED_PIXELS, RESIZED_PIXELS, qwen_processor=True),
    RELATIVE_1000: BoxFormat(RELATIVE_1000, RELATIVE_1000),
    RELATIVE_1: BoxFormat(RELATIVE_1, RELATIVE_1),
    ORIGINAL: BoxFormat(ORIGINAL, ORIGINAL),
}
"""Named formats: model families with their processors' defaults, and the generic systems.

Qwen3-VL's processor (patch 16, 65,536 to 16,777,216 pixels) decides its
image tokens; its boxes are relative and need no grid.
"""

LEGACY_BOX_COORDS = {"model_input": RESIZED_PIXELS, "original": ORIGINAL}
"""The former ``box_coords`` values and the formats they now name."""


@functools.lru_cache(maxsize=65_536)
def smart_resize(
    height: int, width: int, factor: int = 28, min_pixels: int = 3136, max_pixels: int = 12845056
) -> tuple[int, int]:
    """``(height, width)`` of the Qwen-VL processors' resize, as transformers computes it.

    Each side rounds to the nearest multiple of ``factor`` (Python's
    ``round``); an area past ``max_pixels`` shrinks by
    ``sqrt(h * w / max_pixels)`` and floors to the factor (at least one);
    one below ``min_pixels`` grows by ``sqrt(min_pixels / (h * w))`` and
    ceils. Raises ``ValueError`` for a side that is not a positive integer or
    an aspect ratio past :data:`MAX_ASPECT_RATIO` (the processor refuses it).

    >>> smart_resize(480, 640)
    (476, 644)
    """
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (height, width)):
        raise ValueError(f"image size: expected positive integer sides, got {width}x{height}")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(
            f"image size: {width}x{height} has an aspect ratio past {MAX_ASPECT_RATIO}, which the "
            "Qwen-VL processors refuse"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value!r:.80}")
    return value


def processor_settings(values: Mapping[str, Any], prefix: str = "") -> dict[str, int]:
    """The given (not ``None``) :data:`PROCESSOR_SETTINGS` of ``values``, checked.

    Raises ``ValueError`` naming the setting (after ``prefix``) for one that
    is not a positive integer, or for ``min_pixels`` above ``max_pixels``.

    >>> processor_settings({"max_pixels": 401408, "patch_size": None})
    {'max_pixels': 401408}
    """
    settings = {
        name: _positive_int(prefix + name, values[name])
        for name in PROCESSOR_SETTINGS
        if values.get(name) is not None
    }
    if settings.get("min_pixels", 0) > settings.get("max_pixels", math.inf):
        raise ValueError(
            f"{prefix}min_pixels: {settings['min_pixels']} is above max_pixels "
            f"{settings['max_pixels']}; give the engine's processor settings "
            "(vllm serve --mm-processor-kwargs)"
        )
    return settings


def row_resize_settings(value: Any) -> dict[str, int]:
    """A row's ``image_resize`` column as processor settings; ``ValueError`` naming it when bad."""
    field = f"{IMAGE_RESIZE_COLUMN}."
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{IMAGE_RESIZE_COLUMN}: expected an object with any of {', '.join(PROCESSOR_SETTINGS)}, "
            f"got {value!r:.80}"
        )
    unknown = sorted(str(key) for key in value if key not in PROCESSOR_SETTINGS)
    if unknown:
        raise ValueError(
            f"{field}{unknown[0]}: unknown setting; known: {', '.join(PROCESSOR_SETTINGS)}"
        )
    return processor_settings(value, prefix=field)


@dataclass(frozen=True)
class BoxFormatChoice:
    """A reward's box format, and every named format as a row may name it, with its processor settings.

    The processor settings (``patch_size``, ``merge_size``, ``min_pixels``,
    ``max_pixels``) apply to resized-pixel formats only, the reward's own and
    a row's (``box_format`` column) alike: they describe the engine's
    processor, not the family.
    """

    default: BoxFormat
    formats: Mapping[str, BoxFormat]
    """:data:`FAMILIES` with the processor settings applied, resolved once when built."""

    def for_row(self, columns: Mapping[str, Any]) -> BoxFormat:
        """The row's format: its ``box_format`` column when set, else the reward's.

        A resized-pixel format takes the row's ``image_resize`` settings
        (:data:`IMAGE_RESIZE_COLUMN`) over the reward's. Raises ``ValueError``
        naming ``box_format`` for an unknown name, ``image_resize`` for bad settings.
        """
        name = columns.get(BOX_FORMAT_COLUMN)
        fmt = self.default if name is None else self.formats[format_named(name).name]
        settings = columns.get(IMAGE_RESIZE_COLUMN)
        if settings is None or fmt.coords != RESIZED_PIXELS:
            return fmt
        return dataclasses.replace(fmt, **row_resize_settings(settings))

    @classmethod
    def build(
        cls,
        box_format: str | None = None,
        *,
        box_coords: str | None = None,
        default: str = "qwen2_5_vl",
        patch_size: int | None = None,
        merge_size: int | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
    ) -> BoxFormatChoice:
        """The choice a reward's parameters make; ``ValueError`` naming the parameter when bad.

        ``box_coords`` is the former name (``model_input`` = ``resized_pixels``,
        ``original``); give one of the two.

        >>> BoxFormatChoice.build("qwen2_5_vl", max_pixels=401408).default.max_pixels
        401408
        """
        if box_format is not None and box_coords is not None:
            raise ValueError(
                "box_coords: the former name of box_format; give box_format alone "
                f"(got box_format={box_format!r} and box_coords={box_coords!r})"
            )
        if box_coords is not None:
            if box_coords not in LEGACY_BOX_COORDS:
                raise ValueError(
                    f"box_coords: expected 'model_input' or 'original', got {box_coords!r:.80} "
                    f"(box_coords is the former name of box_format: {', '.join(FAMILIES)})"
                )
            box_format = LEGACY_BOX_COORDS[box_coords]
        overrides = processor_settings(
            {
                "patch_size": patch_size,
                "merge_size": merge_size,
                "min_pixels": min_pixels,
                "max_pixels": max_pixels,
            }
        )
        formats = FAMILIES
        if overrides:
            formats = {
                name: dataclasses.replace(fmt, **overrides) if fmt.coords == RESIZED_PIXELS else fmt
                for name, fmt in FAMILIES.items()
            }
        chosen = format_named(default if box_format is None else box_format)
        return cls(formats[chosen.name], formats)


def format_named(name: Any) -> BoxFormat:
    """The format called ``name`` (:data:`FAMILIES`); ``ValueError`` naming ``box_format`` otherwise."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise ValueError(
            f"box_format: unknown format {name!r:.80}"
            f"{did_you_mean(str(name), FAMILIES)}; known: {', '.join(FAMILIES)}"
        )
    return FAMILIES[name]


def image_column(columns: Mapping[str, Any]) -> str | None:
    """The first of :data:`IMAGE_COLUMNS` the row fills (a non-empty path, list or image), or ``None``.

    >>> image_column({"image_path": "", "images": ["a.png"]})
    'images'
    """
    return next((key for key in IMAGE_COLUMNS if _has_value(columns.get(key))), None)


def row_image_size(columns: Mapping[str, Any]) -> tuple[tuple[int, int], str] | None:
    """``((width, height), column)`` of the row's image (``image_path``, ``image`` or ``images``).

    ``None`` when the row has none; ``ValueError`` naming the column for an
    unreadable image. A path is read from its header only; a PIL image (as
    TRL passes them) by its ``size``; a list by its first item.
    """
    column = image_column(columns)
    if column is None:
        return None
    value = columns[column]
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, Image.Image):
        return value.size, column
    return image_size(image_path(value, column)), column


def row_converter(columns: Mapping[str, Any], fmt: BoxFormat) -> BoxConverter | None:
    """The map from ``fmt``'s boxes to the row's original pixels; ``None`` to compare as written.

    ``None`` for ``original``, and for a resized-pixel row with neither an
    image nor ``image_grid_thw`` (nothing to convert by). ``ValueError``
    naming the field for: a relative format without an image (its size is
    needed), a grid without an image, a bad or unreadable one, a row's
    ``image_grid_thw`` that no pixel bounds give for its image
    (:func:`model_input_size`), or an image a Qwen family's processor refuses
    (whatever the answer: the row cannot be scored).
    """
    if fmt.coords == ORIGINAL:
        return None
    found = row_image_size(columns)
    grid = columns.get("image_grid_thw")
    if fmt.coords == RESIZED_PIXELS and grid is not None:
        grid = grid_thw(grid)  # a malformed grid is named before a missing image
    if found is None:
        if fmt.coords != RESIZED_PIXELS:
            raise ValueError(
                f"image_path: missing; box_format {fmt.name!r} gives boxes relative to the image, "
                "so its size is needed (image_path, image or images)"
            )
        if grid is None:
            return None
        raise ValueError(
            "image_path: missing; image_grid_thw is given, so the original image (image_path, "
            "image or images) is needed to scale the predicted box"
        )
    size, column = found
    if fmt.qwen_processor:
        check_aspect(size, column)
    if fmt.coords != RESIZED_PIXELS:
        return BoxConverter(fmt, size)
    return BoxConverter(fmt, size, model_input_size(grid, size, fmt, column))


def aspect_refused(size: tuple[int, int]) -> bool:
    """True when the Qwen-VL processors refuse an image of ``(width, height)`` (aspect past :data:`MAX_ASPECT_RATIO`)."""
    return max(size) / min(size) > MAX_ASPECT_RATIO


def check_aspect(size: tuple[int, int], column: str) -> None:
    """Nothing when the Qwen-VL processors accept an image of ``size``; else ``ValueError`` naming ``column``."""
    width, height = size
    if aspect_refused(size):
        raise ValueError(
            f"{column}: the {width}x{height} image has an aspect ratio past {MAX_ASPECT_RATIO}, "
            "which the Qwen-VL processors (transformers, vLLM) refuse: the policy never saw it. "
            "Drop the row, or crop or pad the image"
        )


def grid_is_possible(grid_hw: tuple[int, int], size: tuple[int, int], fmt: BoxFormat) -> bool:
    """True when :func:`smart_resize` gives ``grid_hw`` (patches) for an image of ``size`` under some pixel bounds.

    ``fmt``'s patch and merge sizes decide the factor; its bounds do not.
    Either the rounded size is within the bounds, or some ``max_pixels``
    shrinks the image to it (``floor(side * s)`` factors per side for one
    scale ``s``), or some ``min_pixels`` grows it (``ceil(side * s)``): each
    is an interval of ``s``, and the grid is possible when one is not empty.

    >>> grid_is_possible((10, 20), (280, 140), FAMILIES["qwen2_5_vl"])
    True
    >>> grid_is_possible((10, 10), (280, 140), FAMILIES["qwen2_5_vl"])
    False
    """
    width, height = size
    if aspect_refused(size):
        return False
    factor = fmt.factor
    h, w = grid_hw[0] * fmt.patch_size, grid_hw[1] * fmt.patch_size
    if h % factor or w % factor:
        return False
    a, b = h // factor, w // factor
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if (h, w) == (h_bar, w_bar):
        return True  # within the bounds
    # the scale at which the area reaches the rounded area, in factors per pixel
    pivot = math.sqrt(h_bar * w_bar / (height * width)) / factor
    shrink_low = max(0.0 if a == 1 else a / height, 0.0 if b == 1 else b / width)
    shrink_high = min((a + 1) / height, (b + 1) / width, pivot)
    grow_low = max((a - 1) / height, (b - 1) / width, pivot)
    grow_high = min(a / height, b / width)
    return shrink_low < shrink_high or grow_low < grow_high


def model_input_size(
    grid: tuple[int, int, int] | None, size: tuple[int, int], fmt: BoxFormat, column: str
) -> tuple[int, int]:
    """The model input's ``(width, height)`` for a row: its grid's size, or ``fmt``'s resize without one.

    ``grid`` is the row's ``image_grid_thw`` (read by :func:`grid_thw`) or
    ``None``. A grid that some pixel bounds give for an image of ``size``
    (:func:`grid_is_possible`) is what the model saw, whatever ``fmt``'s
    bounds; one no bounds give raises ``ValueError`` naming
    ``image_grid_thw``, both grids and the fix. Without a grid the resize is
    ``fmt``'s (``ValueError`` for an image it refuses).
    """
    if grid is None:
        return fmt.resized(*size)
    if grid_is_possible((grid[1], grid[2]), size, fmt):
        return grid[2] * fmt.patch_size, grid[1] * fmt.patch_size
    expected = fmt.grid(*size)
    raise ValueError(
        f"image_grid_thw: the row's grid {list(grid)} is not a resize of its "
        f"{size[0]}x{size[1]} image ({column}) by {fmt.name} under any pixel bounds (patch "
        f"{fmt.patch_size}, merge {fmt.merge_size}; at min_pixels {fmt.min_pixels}, max_pixels "
        f"{fmt.max_pixels} it is {list(expected)}). The grid belongs to another image or "
        "another patch size: fix the row, give the reward the engine's patch_size, or drop the "
        "column and the reward computes the grid"
    )


def _has_value(value: Any) -> bool:
    if isinstance(value, (list, tuple, str)):
        return len(value) > 0
    return value is not None


BOX_FORMAT_PARAMS = (
    "box_format",
    "box_coords",
    "patch_size",
    "merge_size",
    "min_pixels",
    "max_pixels",
)
"""The keyword arguments that choose a box reward's format (:meth:`BoxFormatChoice.build`)."""


class BoxComponent(Component):
    """A reward that reads boxes: its box format (:mod:`~skyrl_rewards.rewards.geometry.box_formats`).

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

    def converter(self, sample: Mapping[str, Any]) -> BoxConverter | None:
        """The row's map from its format to original pixels (``None``: as written; see ``row_converter``)."""
        return row_converter(sample, self.box_format.for_row(sample))

    def check_image_seen(self, sample: Mapping[str, Any]) -> None:
        """Nothing when the row's image (if any) is one the row's format's processor accepts.

        For a row scored without converting a box (a GUI action with no
        position): ``ValueError`` naming the column for an image a Qwen
        family's processor refuses or one that cannot be read, as
        :func:`row_converter` raises for the others: the policy never saw it.
        """
        fmt = self.box_format.for_row(sample)
        found = row_image_size(sample) if fmt.qwen_processor else None
        if found is not None:
            check_aspect(*found)

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
