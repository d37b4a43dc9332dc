#!/usr/bin/env bash
# What installing TRL (the test extra) costs: time, download and disk, CPU and CUDA builds of torch.
#
#   bash scripts/benchmarks/measure_trl_install.sh            # CPU path: a fresh venv, torch + trl installed
#   bash scripts/benchmarks/measure_trl_install.sh --cuda     # also: what the index's CUDA build would pull
#
# The CPU path installs torch the way pip is configured on this machine (a local CPU wheel, or
# PyTorch's CPU index via PIP_INDEX_URL); the CUDA path lists what pip resolves from the package
# index with no local configuration (--isolated), downloads those wheels and unpacks them into a
# scratch folder to measure them. Everything goes under a temporary folder that is removed at exit.
set -euo pipefail
TORCH="${TORCH:-torch==2.13.0}"
TRL="${TRL:-trl==1.16.0}"
PY="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
before=$(du -sm "$work/venv" | cut -f1)
start=$(date +%s)
"$work/venv/bin/pip" install -q "$TORCH" "$TRL"
echo "CPU path: $TORCH $TRL installed in $(( $(date +%s) - start )) s," \
  "venv +$(( $(du -sm "$work/venv" | cut -f1) - before )) MB" \
  "(torch $(du -sm "$work"/venv/lib/python*/site-packages/torch | cut -f1) MB)"

if [[ "${1:-}" == "--cuda" ]]; then
  "$work/venv/bin/pip" install -q --isolated --dry-run --ignore-installed --report "$work/report.json" \
    "$TORCH" "$TRL"
  "$work/venv/bin/python" - "$work/report.json" > "$work/cuda.txt" <<'PY'
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if meta["name"].lower().startswith(("nvidia", "cuda", "triton", "torch")):
        print(f"{meta['name']}=={meta['version']}")
PY
  echo "CUDA path pulls: $(tr '\n' ' ' < "$work/cuda.txt")"
  start=$(date +%s)
  "$work/venv/bin/pip" download -q --isolated --no-deps -d "$work/wheels" $(cat "$work/cuda.txt")
  echo "CUDA path download: $(du -sm "$work/wheels" | cut -f1) MB in $(( $(date +%s) - start )) s"
  start=$(date +%s)
  "$work/venv/bin/pip" install -q --no-deps --no-index --target "$work/unpacked" "$work"/wheels/*.whl
  echo "CUDA path installed: $(du -sm "$work/unpacked" | cut -f1) MB, unpacked in $(( $(date +%s) - start )) s"
fi
