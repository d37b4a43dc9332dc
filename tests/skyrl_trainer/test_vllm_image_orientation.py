"""The size the reward reads for an image file is the size vLLM's own loader gives the processor."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from oriented_images import BROKEN_EXIF, exif_bytes, save_png_with_late_exif
from PIL import Image
from vllm.multimodal.media.image import ImageMediaIO

from skyrl_rewards.rewards.geometry.boxes import image_size
from skyrl_rewards.train.dataset import image_data_uri


@pytest.mark.parametrize("orientation", [1, 3, 5, 6, 8, "broken"])
@pytest.mark.parametrize("kind", ["JPEG", "PNG", "PNG after IDAT"])
def test_vllm_loads_the_turned_image_and_the_reward_reads_its_size(
    orientation: int | str, kind: str, tmp_path: Path
) -> None:
    path = tmp_path / f"photo.{kind.split()[0].lower()}"
    exif = BROKEN_EXIF if orientation == "broken" else exif_bytes(orientation)
    if kind == "PNG after IDAT":  # an eXIf chunk Pillow finds only by decoding the image
        save_png_with_late_exif(path, exif)
    else:
        Image.new("RGB", (400, 300), (0, 90, 200)).save(path, kind, exif=exif)
    loader = ImageMediaIO()
    from_file = loader.load_file(path).media
    # prepare_skyrl_data.py sends the image as a data URL: vLLM decodes it with load_base64
    media_type, data = image_data_uri(path).removeprefix("data:").split(";base64,")
    from_url = loader.load_base64(media_type, data).media
    assert from_file.size == from_url.size == image_size(str(path))
    turned = orientation in (5, 6, 8)
    assert image_size(str(path)) == ((300, 400) if turned else (400, 300))
    assert base64.b64decode(data) == path.read_bytes()
