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

InternVL2.5 answers on the 0-1000 grid too (``relative_1000``). For a
resized-pixel format the resize is computed from the image's size and the
processor's parameters (the engine's settings win: give the reward the same
``min_pixels``/``max_pixels`` as ``vllm serve --mm-processor-kwargs``); a row
that carries ``image_grid_thw`` is checked against it, and a mismatch is a
dataset error naming both. A row may name its own format in a ``box_format``
column (a dataset that mixes families); it wins over the reward's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image

from skyrl_rewards.rewards.contract.component_base import Component, work_digest
from skyrl_rewards.rewards.contract.text import answer_span, completion_text
from skyrl_rewards.rewards.geometry.boxes import Box, grid_thw, image_path, image_size
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

    def to_original(self, box: Box, image_size: tuple[int, int]) -> Box:
        """``box`` in this format, in pixels of an original image of ``(width, height)``.

        Raises ``ValueError`` for an image :func:`smart_resize` refuses (resized pixels only).
        """
        width, height = image_size
        if self.coords == ORIGINAL:
            return box
        if self.coords == RESIZED_PIXELS:
            resized_w, resized_h = self.resized(width, height)
            sx, sy = width / resized_w, height / resized_h
        else:
            unit = 1000.0 if self.coords == RELATIVE_1000 else 1.0
            sx, sy = width / unit, height / unit
        return box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy


FAMILIES: dict[str, BoxFormat] = {
    "qwen2_5_vl": BoxFormat("qwen2_5_vl", RESIZED_PIXELS),
    "qwen2_vl": BoxFormat("qwen2_vl", RELATIVE_1000),
    "qwen3_vl": BoxFormat(
        "qwen3_vl", RELATIVE_1000, patch_size=16, min_pixels=65_536, max_pixels=16_777_216
    ),
    RESIZED_PIXELS: BoxFormat(RESIZED_PIXELS, RESIZED_PIXELS),
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

        Raises ``ValueError`` naming ``box_format`` for an unknown name.
        """
        name = columns.get(BOX_FORMAT_COLUMN)
        if name is None:
            return self.default
        return self.formats[format_named(name).name]

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
        overrides = {
            name: _positive_int(name, value)
            for name, value in (
                ("patch_size", patch_size),
                ("merge_size", merge_size),
                ("min_pixels", min_pixels),
                ("max_pixels", max_pixels),
            )
            if value is not None
        }
        if overrides.get("min_pixels", 0) > overrides.get("max_pixels", math.inf):
            raise ValueError(
                f"min_pixels: {min_pixels} is above max_pixels {max_pixels}; give the engine's "
                "processor settings (vllm serve --mm-processor-kwargs)"
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


def row_converter(columns: Mapping[str, Any], fmt: BoxFormat) -> Callable[[Box], Box] | None:
    """The map from ``fmt``'s boxes to the row's original pixels; ``None`` to compare as written.

    ``None`` for ``original``, and for a resized-pixel row with neither an
    image nor ``image_grid_thw`` (nothing to convert by). ``ValueError``
    naming the field for: a relative format without an image (its size is
    needed), a grid without an image, a bad or unreadable one, or a row's
    ``image_grid_thw`` that is not the processor's grid for its image.
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
    if fmt.coords == RESIZED_PIXELS:
        check_row_grid(grid, size, fmt, column)
    return lambda box: fmt.to_original(box, size)


def check_row_grid(
    grid: tuple[int, int, int] | None, size: tuple[int, int], fmt: BoxFormat, column: str
) -> None:
    """Nothing when ``grid`` (the row's ``image_grid_thw``, read by :func:`grid_thw`) is ``None`` or ``fmt``'s grid for an image of ``size``.

    Raises ``ValueError`` naming ``image_grid_thw``, both grids and the fix otherwise.
    """
    if grid is None:
        return
    expected = fmt.grid(*size)
    if grid[1:] != expected[1:]:
        raise ValueError(
            f"image_grid_thw: the row's grid {list(grid)} is not the resize of its "
            f"{size[0]}x{size[1]} image ({column}) by {fmt.name} (patch {fmt.patch_size}, merge "
            f"{fmt.merge_size}, min_pixels {fmt.min_pixels}, max_pixels {fmt.max_pixels}), which "
            f"is {list(expected)}. Give the reward the engine's min_pixels/max_pixels, or drop "
            "the column and the reward computes the grid"
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
