"""The DEBUG_MODE / LOG_PATH sink: where it writes, and that it never changes a reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_rewards import format_reward
from skyrl_rewards.rewards.contract.debug_log import debug_log_path


@pytest.mark.parametrize(
    ("debug", "log_path", "expected"),
    [
        ("true", "/tmp/run.txt", "/tmp/run_format.txt"),  # trailing .txt replaced
        ("true", "/tmp/run.log", "/tmp/run.log_format.txt"),  # no .txt: appended
        ("false", "/tmp/run.txt", None),
        ("true", "", None),
    ],
)
def test_debug_log_path(
    monkeypatch: pytest.MonkeyPatch, debug: str, log_path: str, expected: str | None
) -> None:
    monkeypatch.setenv("DEBUG_MODE", debug)
    monkeypatch.setenv("LOG_PATH", log_path)
    assert debug_log_path() == expected


def test_contents_and_results_are_appended(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEBUG_MODE", "true")
    monkeypatch.setenv("LOG_PATH", str(tmp_path / "run.txt"))
    assert format_reward(["<think>a</think><answer>b</answer>", "nope"]) == [1.0, 0.0]
    written = (tmp_path / "run_format.txt").read_text()
    assert "Content: nope" in written and "format_reward: 1.0" in written


def test_unwritable_log_never_changes_a_reward(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DEBUG_MODE", "true")
    monkeypatch.setenv("LOG_PATH", str(tmp_path / "missing_dir" / "run.txt"))
    assert format_reward(["<think>a</think><answer>b</answer>"]) == [1.0]
