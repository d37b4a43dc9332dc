"""Image paths that are not regular files are refused before any read (a FIFO would block)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from skyrl_rewards import iou_reward
from skyrl_rewards.rewards.geometry.boxes import image_size


def _special(tmp_path: Path, kind: str) -> str:
    if kind == "fifo":
        path = tmp_path / "image.png"
        os.mkfifo(path)
        return str(path)
    if kind == "directory":
        return str(tmp_path)
    return "/dev/zero"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_non_regular_files_are_a_dataset_error_not_a_hang(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _special(tmp_path, kind)
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    outcome: list[BaseException] = []

    def score() -> None:
        try:
            iou_reward(
                ["<answer>[1, 2, 3, 4]</answer>"],
                ["<answer>[1, 2, 3, 4]</answer>"],
                image_grid_thw=[[1, 2, 2]],
                image_path=[path],
            )
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=score, daemon=True)  # a hang must not hang the suite
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "iou_reward blocked on a non-regular file"
    assert len(outcome) == 1 and isinstance(outcome[0], ValueError)
    assert "sample 0: image_path:" in str(outcome[0])
    assert "is not a regular file" in str(outcome[0])


def test_the_field_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^images: .* is not a regular file"):
        image_size(str(tmp_path), "images")
