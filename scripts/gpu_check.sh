#!/usr/bin/env bash
# GPU check (issue 29): the project's GPU-marked tests, then benchmarks/gpu_check.py (a bf16
# GRPO + PaW update of the tiny model through the trainer, full fine-tuning steps of the
# Qwen2.5-1.5B architecture at the paper's row shape and vocabulary, the PaW term's step
# overhead at those shapes (issue 40, the paper's Figure 5), FSDP2 over every visible GPU). Writes benchmarks/results/gpu_check_<device>.json (or the file given as $1).
#
#   bash scripts/gpu_check.sh                      # ~4 min on one H200
#   WHEELS=wheels/ bash scripts/gpu_check.sh       # offline: install the wheels in wheels/ first
#
# Needs a Python with a CUDA PyTorch and transformers, peft, accelerate, tokenizers,
# safetensors, pytest, pyyaml, tqdm, rich (what a CUDA image with PyTorch usually has), plus
# gymnasium and farama-notifications, e.g. as wheels:
#   pip download --no-deps -d wheels/ gymnasium==1.4.0 farama-notifications==0.0.6
# The repository needs no install: it runs from this checkout. Without a GPU it runs the
# CPU-sized parts (gpu_check.py --quick) and the GPU tests skip.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ -n "${WHEELS:-}" ]; then
    site=${WHEELS_TARGET:-/tmp/paw-gym-gpu-check-site}
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl \
        || { echo "gpu_check: could not install the wheels in $WHEELS" >&2; exit 2; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
args=("$@")
[ ${#args[@]} -gt 0 ] && args=(--out "$1")
if ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_check: no CUDA device; running the CPU-sized parts" >&2
    args+=(--quick)
fi
nvidia-smi 2>/dev/null | head -15
status=0
"$PYTHON" -m pytest -m gpu -p no:cacheprovider -q -rs benchmarks/tests/test_gpu.py || status=$?
"$PYTHON" -m benchmarks.gpu_check "${args[@]}" || status=$?
exit $status
