"""The size the reward reads for an image file is the size vLLM's own loader gives the processor."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from PIL import Image
from vllm.multimodal.media.image import ImageMediaIO

from skyrl_rewards.rewards.geometry.boxes import image_size
from skyrl_rewards.train.dataset import image_data_uri


@pytest.mark.parametrize("orientation", [1, 3, 5, 6, 8])
@pytest.mark.parametrize("kind", ["JPEG", "PNG"])
def test_vllm_loads_the_turned_image_and_the_reward_reads_its_size(
    orientation: int, kind: str, tmp_path: Path
) -> None:
    path = tmp_path / f"photo.{kind.lower()}"
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.new("RGB", (400, 300), (0, 90, 200)).save(path, kind, exif=exif.tobytes())
    loader = ImageMediaIO()
    from_file = loader.load_file(path).media
    # prepare_skyrl_data.py sends the image as a data URL: vLLM decodes it with load_base64
    media_type, data = image_data_uri(path).removeprefix("data:").split(";base64,")
    from_url = loader.load_base64(media_type, data).media
    assert from_file.size == from_url.size == image_size(str(path))
    assert image_size(str(path)) == ((300, 400) if orientation >= 5 else (400, 300))
    assert base64.b64decode(data) == path.read_bytes()
