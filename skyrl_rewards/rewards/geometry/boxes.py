"""Boxes: IoU with VLM-R1's pixel convention, box extraction, grids and image sizes."""

from __future__ import annotations

import functools
import math
import numbers
import os
import re
import stat
import struct
from collections.abc import Sequence
from typing import Any, BinaryIO

from PIL import Image

from skyrl_rewards.rewards.contract.text import answer_span, cap

Box = tuple[float, float, float, float]

MAX_BOX_SEARCH_CHARS = 10_000
"""The answer span is cut to this length before the box regex runs."""

_NUMBER = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BOX = re.compile(r"\[" + ",".join([_NUMBER] * 4) + r"\]")
_CORNER_PAIR = re.compile(
    r"\(" + ",".join([_NUMBER] * 2) + r"\)\s*,\s*\(" + ",".join([_NUMBER] * 2) + r"\)"
)
"""Qwen2-VL's native box: ``(x1,y1),(x2,y2)``, between ``<|box_start|>`` and ``<|box_end|>`` or decoded without them."""

EXIF_ORIENTATION = 0x0112
EXIF_TRANSPOSED = frozenset({5, 6, 7, 8})
"""EXIF orientations that swap width and height (a quarter turn, possibly mirrored)."""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""The eight bytes before a PNG file's first chunk."""
MAX_EXIF_BYTES = 1 << 20
"""A longer ``eXIf`` chunk is broken EXIF (no orientation) and is not read: its length is
the file's word, and a JPEG's EXIF segment cannot pass 64 KiB."""


def is_finite_number(value: Any) -> bool:
    """A finite int or float (not a bool; an int too large for a float counts as infinite).

    >>> is_finite_number(float("nan")), is_finite_number(True), is_finite_number(10**400)
    (False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def as_box(value: Any) -> Box | None:
    """``value`` as four finite floats, or ``None`` when it is not a box.

    >>> as_box([1, 2, 3, 4])
    (1.0, 2.0, 3.0, 4.0)
    """
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        return None
    coords = []
    for coord in value:
        if isinstance(coord, bool) or not isinstance(coord, (int, float)):
            return None
        try:
            coords.append(float(coord))
        except OverflowError:
            return None
    if not all(math.isfinite(c) for c in coords):
        return None
    return coords[0], coords[1], coords[2], coords[3]


def iou(box1: Sequence[float], box2: Sequence[float]) -> float:
    """IoU in [0, 1] with VLM-R1's pixel convention; 0.0 for degenerate or malformed boxes.

    The intersection's far corners are ``x2 - 1`` / ``y2 - 1`` and its sides
    get ``+ 1``; it counts only when strictly positive after that. The union is
    the plain areas minus the intersection.

    >>> iou([0, 0, 10, 10], [0, 0, 10, 10])
    1.0
    """
    a, b = as_box(box1), as_box(box2)
    if a is None or b is None:
        return 0.0
    if a[2] <= a[0] or a[3] <= a[1] or b[2] <= b[0] or b[3] <= b[1]:
        return 0.0
    inter_x1, inter_y1 = max(a[0], b[0]), max(a[1], b[1])
    inter_x2, inter_y2 = min(a[2] - 1, b[2] - 1), min(a[3] - 1, b[3] - 1)
    if inter_x1 < inter_x2 and inter_y1 < inter_y2:
        inter = (inter_x2 - inter_x1 + 1) * (inter_y2 - inter_y1 + 1)
    else:
        inter = 0.0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    if not union > 0 or not math.isfinite(union):
        return 0.0
    return min(1.0, max(0.0, inter / union))


def predicted_box(content: str) -> Box | None:
    """The first box in the answer span of ``content``, or ``None``.

    A box is ``[a, b, c, d]`` of numbers (JSON ``bbox_2d``, and InternVL's
    ``<box>[[a, b, c, d]]</box>``) or Qwen2-VL's corner pair ``(a,b),(c,d)``
    (its native ``<|box_start|>(a,b),(c,d)<|box_end|>``, and the same with the
    special tokens decoded away: ``label(a,b),(c,d)``); the earliest wins.

    >>> predicted_box("<|object_ref_start|>cat<|object_ref_end|><|box_start|>(10,20),(30,40)<|box_end|>")
    (10.0, 20.0, 30.0, 40.0)
    """
    span = cap(answer_span(content), MAX_BOX_SEARCH_CHARS)
    found = [m for m in (_BOX.search(span), _CORNER_PAIR.search(span)) if m is not None]
    if not found:
        return None
    match = min(found, key=lambda m: m.start())
    return as_box([float(group) for group in match.groups()])


def grid_thw(value: Any, field: str = "image_grid_thw") -> tuple[int, int, int]:
    """``value`` (a triple, possibly nested one level or a tensor) as positive ints, else ``ValueError``."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], (list, tuple)):
        value = value[0]
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise ValueError(f"{field}: expected (t, h, w), got {value!r:.80}")
    if not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in value
    ):
        raise ValueError(f"{field}: expected three positive integers, got {value!r:.80}")
    return int(value[0]), int(value[1]), int(value[2])


def image_path(value: Any, field: str = "image_path") -> str:
    """A path, or the first element of a list of paths, else ``ValueError``."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field}: expected a path or a list of paths, got {value!r:.80}")
    return value


@functools.lru_cache(maxsize=65_536)
def image_size(path: str, field: str = "image_path") -> tuple[int, int]:
    """``(width, height)`` of the image at ``path`` as shown, read from its header only.

    An EXIF orientation that turns the image a quarter (5 to 8) swaps the
    stored sides: vLLM (``normalize_image``) and transformers (``load_image``)
    both apply ``ImageOps.exif_transpose`` before the processor, so that is the
    image the policy saw and the one its boxes are on.

    Raises ``ValueError`` naming ``field`` and the path when it is missing,
    unreadable, not a regular file (a FIFO or device would block the read for
    ever: it is refused before any read) or claims a decompression-bomb size.
    """
    try:
        # non-blocking open: opening a FIFO without a writer would otherwise wait for one
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise ValueError(f"{field}: cannot read image {path!r}: {error}") from error
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ValueError(
            f"{field}: {path!r} is not a regular file (a FIFO, device or directory); "
            "point the dataset at an image file"
        )
    with os.fdopen(descriptor, "rb") as file:
        try:
            with Image.open(file) as image:
                width, height = image.size
                if _orientation(image, file) in EXIF_TRANSPOSED:
                    return height, width
                return width, height
        except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as error:
            raise ValueError(f"{field}: cannot read image {path!r}: {error}") from error


def _orientation(image: Image.Image, file: BinaryIO) -> int | None:
    """The EXIF orientation of an image opened from ``file``, without decoding it (``None`` without one).

    A PNG's ``eXIf`` chunk after the pixel data counts too, as it does for
    ``exif_transpose`` (Pillow decodes the image to find it): the chunks are
    skipped over by their lengths instead (:func:`_late_png_exif`). Broken
    EXIF data is no orientation, as for vLLM (its ``normalize_image`` keeps
    the image as stored when the transpose fails).
    """
    try:
        if image.format == "PNG" and "exif" not in image.info:
            exif = Image.Exif()
            exif.load(_late_png_exif(file))
        else:
            exif = image.getexif()
        orientation = exif.get(EXIF_ORIENTATION)
    except (OSError, SyntaxError, ValueError, struct.error):
        return None
    return orientation if isinstance(orientation, int) else None


def _late_png_exif(file: BinaryIO) -> bytes:
    """The payload of a PNG file's ``eXIf`` chunk found by walking its chunk headers, or ``b""``
    (also for one longer than :data:`MAX_EXIF_BYTES`)."""
    file.seek(len(PNG_SIGNATURE))
    while True:
        header = file.read(8)
        if len(header) < 8:
            return b""
        length, kind = struct.unpack(">I4s", header)
        if kind == b"eXIf":
            return file.read(length) if length <= MAX_EXIF_BYTES else b""
        if kind == b"IEND":
            return b""
        file.seek(length + 4, os.SEEK_CUR)  # the data and its CRC
