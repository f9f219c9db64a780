#!/usr/bin/env bash
# Creates .venv-bench: the peer engines bench/bench_peers.py times minirt against.
# The peers (torch, ExecuTorch, TensorFlow, LiteRT) are large and kept out of the
# project's own .venv, so they never enter the test environment.
#
#   bash bench/setup-peers.sh            # then: .venv-bench/bin/python bench/bench_peers.py
#
# Versions, checked to resolve together in one plain `pip install` (no --no-deps or
# constraints needed) on Python 3.11 / Linux x86_64, 3.7 GB installed:
#   torch 2.13.0 (CPU build), torchvision 0.28.0, executorch 1.4.1 (1.5.x pulls
#   torch 2.14 with CUDA libraries), ai-edge-litert 2.3.0, tensorflow-cpu 2.21.0,
#   onnxruntime 1.32.0, onnx 1.23.2, transformers 5.24.0, numpy 2.4.6.
# torch's CPU build must be what pip finds for `torch==2.13.0` (on this machine pip's
# find-links holds it; elsewhere add PyTorch's CPU wheel index with
# PIP_EXTRA_INDEX_URL): PyPI's default torch wheel brings the CUDA libraries, which
# the check at the end refuses. TORCH_SPEC overrides the requirement, e.g.
# TORCH_SPEC='torch==2.13.0+cpu'.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$here/.venv-bench}"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --progress-bar off)
"${pip[@]}" --upgrade pip wheel
"${pip[@]}" \
  "${TORCH_SPEC:-torch==2.13.0}" 'torchvision==0.28.0' 'executorch==1.4.1' \
  'ai-edge-litert==2.3.0' 'tensorflow-cpu==2.21.*' \
  onnxruntime onnx onnxscript transformers
"${pip[@]}" -e "$here"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("torch", "torchvision", "executorch", "ai-edge-litert", "tensorflow-cpu",
             "onnxruntime", "onnx", "transformers", "numpy", "minibuild"):
    print(f"{name:16s} {md.version(name)}")
assert "+cpu" in md.version("torch") or not any(
    d.metadata["Name"].startswith("nvidia-") for d in md.distributions()), \
    "torch pulled CUDA libraries: install the CPU build of torch 2.13.0"
PY
