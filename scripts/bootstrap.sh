#!/usr/bin/env bash
# Set-up for `make verify` / `make test`: a local virtual environment with normverify installed
# (editable) and everything its runs need.
#
# torch: a CUDA build already in the venv is kept, and so is one installed in the Python that creates
# the venv (the venv then sees that Python's site-packages). Otherwise, with an NVIDIA GPU visible
# (nvidia-smi -L succeeds) pip's default torch (a CUDA build) is installed; without one the CPU
# build torch==$TORCH_CPU_VERSION. Where pip is not configured with a local CPU wheel, point
# TORCH_CPU_INDEX at PyTorch's CPU wheel index to avoid the multi-GB CUDA download.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_CPU_VERSION=${TORCH_CPU_VERSION:-2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
  if "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1; then
    echo "bootstrap: $PYTHON has a CUDA torch; the venv will use it (--system-site-packages)"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
torch_build=$("$VENV/bin/python" -c 'import torch; print("cuda" if torch.version.cuda else "cpu")' 2>/dev/null || echo none)

if [ "$torch_build" = none ]; then
  if has_gpu; then
    echo "bootstrap: NVIDIA GPU found, installing pip's default (CUDA) torch"
    "${pip[@]}" install -q torch
  else
    echo "bootstrap: no GPU, installing the CPU build torch==$TORCH_CPU_VERSION"
    "${pip[@]}" install -q "torch==$TORCH_CPU_VERSION" ${TORCH_CPU_INDEX:+--index-url "$TORCH_CPU_INDEX"}
  fi
else
  echo "bootstrap: keeping the venv's torch ($torch_build build)"
fi
"${pip[@]}" install -q -e ".[all]"
