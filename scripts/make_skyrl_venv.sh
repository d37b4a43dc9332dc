#!/usr/bin/env bash
# A Python 3.12 virtual environment with the real SkyRL 0.4 trainer and this project
# (editable, with the skyrl and dev extras): what `python -m skyrl_rewards.train` and the
# tests under tests/skyrl_trainer need. SkyRL 0.4 requires Python >= 3.12, and building its
# config imports vLLM, so the venv holds torch and vLLM (CUDA wheels from the index: about
# 4 GB downloaded, 9 GB on disk; see docs/usage.md). No GPU is needed to build or test.
#
#   bash scripts/make_skyrl_venv.sh            # -> .venv-skyrl
#   VENV=/path/to/venv bash scripts/make_skyrl_venv.sh
#   bash scripts/make_skyrl_venv.sh --which-python   # print the Python 3.12 it would use, or fail
#
# The Python 3.12 interpreter: $PYTHON312, else `python3.12` if it runs, else pyenv's newest 3.12.
set -euo pipefail
cd "$(dirname "$0")/.."
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

PY=$(find_python312)
if [[ "${1:-}" == "--which-python" ]]; then echo "$PY"; exit 0; fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e ".[skyrl,dev]"
echo "$VENV ready: $("$VENV/bin/python" --version)"
