"""What the README, docs/usage.md and the launch scripts write lands in a folder git ignores
(issue 34: `--check` wrote under ~/data, the README's data step left an untracked `data/`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "usage.md"]
LAUNCH = sorted((ROOT / "scripts" / "launch").glob("launch_*.sh"))
WRITES = re.compile(r"--(?:out-dir|output|out) (?P<path>[\w./-]+)")
"""A path a documented command writes: its ``--out-dir``, ``--output`` or ``--out``."""
DEFAULT_DATA_DIR = re.compile(r"^DATA_DIR=\$\{DATA_DIR:-\$PWD/(?P<path>[\w./-]+)\}", re.M)


def ignored(path: str) -> bool:
    """Whether git ignores ``path`` (relative to the checkout) here."""
    done = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, capture_output=True
    )
    return done.returncode == 0


pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)


def test_documented_commands_write_where_git_does_not_look() -> None:
    written = {
        (doc.name, match["path"])
        for doc in DOCS
        for match in WRITES.finditer(doc.read_text())
        if not match["path"].startswith("OUT")  # OUT.jsonl: the user's own choice
    }
    assert ("README.md", "out/data/rec") in written  # the README's data step
    assert [w for w in written if not ignored(f"{w[1]}/x.parquet")] == []


@pytest.mark.parametrize("script", LAUNCH, ids=lambda p: p.name)
def test_launch_scripts_write_the_parquet_in_the_checkout_where_git_ignores_it(
    script: Path,
) -> None:
    text = script.read_text()
    default = DEFAULT_DATA_DIR.search(text)
    assert default is not None, "DATA_DIR's default is the checkout's out/data/..."
    assert ignored(f"{default['path']}/train.parquet")
    assert "$HOME" not in text.split("set -euo pipefail")[1]  # nothing under the user's home
