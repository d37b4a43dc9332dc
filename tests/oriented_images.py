"""Image files with an EXIF orientation where the engines look for it: in the header, or a PNG's
``eXIf`` chunk after the pixel data (which Pillow writes nowhere itself), or broken EXIF data."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from PIL import Image


def exif_bytes(orientation: int) -> bytes:
    """An EXIF block holding only ``orientation``."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def save_oriented(
    path: Path, kind: str, orientation: int, size: tuple[int, int] = (400, 300)
) -> None:
    """A ``size`` image saved as ``kind`` with the orientation where Pillow writes it (the header)."""
    Image.new("RGB", size, (0, 90, 200)).save(path, kind, exif=exif_bytes(orientation))


def save_png_with_late_exif(path: Path, payload: bytes, size: tuple[int, int] = (400, 300)) -> None:
    """A PNG whose ``eXIf`` chunk (``payload``, TIFF-headed EXIF) comes after its ``IDAT``, before ``IEND``."""
    buffer = io.BytesIO()
    Image.new("RGB", size, (0, 90, 200)).save(buffer, "PNG")
    data = buffer.getvalue()
    iend = data.rindex(b"IEND") - 4  # the IEND chunk starts with its length
    body = b"eXIf" + payload.removeprefix(b"Exif\x00\x00")
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    path.write_bytes(data[:iend] + chunk + data[iend:])


BROKEN_EXIF = b"not a TIFF header"
"""EXIF data Pillow cannot parse: ``exif_transpose`` raises, vLLM keeps the image as stored."""
