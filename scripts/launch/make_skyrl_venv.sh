#!/usr/bin/env bash
# A Python 3.12 virtual environment with the real SkyRL 0.4 trainer and this project
# (editable, with the skyrl and dev extras): what `python -m skyrl_rewards.train` and the
# tests under tests/skyrl_trainer need. SkyRL 0.4 requires Python >= 3.12, and building its
# config imports vLLM, so the venv holds torch and vLLM (CUDA wheels from the index: about
# 4 GB downloaded, 9 GB on disk; see docs/usage.md). No GPU is needed to build or test.
#
#   bash scripts/launch/make_skyrl_venv.sh            # -> .venv-skyrl
#   VENV=/path/to/venv bash scripts/launch/make_skyrl_venv.sh
#   bash scripts/launch/make_skyrl_venv.sh --which-python   # print the Python 3.12 it would use, or fail
#
# The Python 3.12 interpreter: $PYTHON312, else `python3.12` if it runs, else pyenv's newest 3.12.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv-skyrl}

find_python312() {
  if [[ -n "${PYTHON312:-}" ]]; then echo "$PYTHON312"; return; fi
  if python3.12 --version >/dev/null 2>&1; then command -v python3.12; return; fi
  local root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  local found
  found=$(ls -d "$root"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -n 1 || true)
  if [[ -n "$found" ]]; then echo "$found"; return; fi
  echo "no Python 3.12 found: install it (SkyRL 0.4 needs >= 3.12) or set PYTHON312" >&2
  return 1
}

# Each stage is announced with the time; pip prints its own lines (Collecting, Downloading,
# Installing): the last stage writes about 9 GB and may print nothing for minutes.
stage() { echo "[$(date -u +%H:%M:%S)] make_skyrl_venv: $*"; }

PY=$(find_python312)
if [[ "${1:-}" == "--which-python" ]]; then echo "$PY"; exit 0; fi
stage "1/3 creating $VENV with $("$PY" --version) ($PY)"
"$PY" -m venv "$VENV"
stage "2/3 upgrading pip"
"$VENV/bin/python" -m pip install --progress-bar off --upgrade pip
stage "3/3 installing this project with SkyRL 0.4, torch and vLLM (about 4 GB to download, 9 GB on disk; minutes)"
"$VENV/bin/python" -m pip install --progress-bar off -e ".[skyrl,dev]"
stage "$VENV ready: $("$VENV/bin/python" --version), $(du -sh "$VENV" | cut -f1) on disk"
