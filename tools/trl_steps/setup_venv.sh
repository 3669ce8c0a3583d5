#!/usr/bin/env bash
# Creates the Python environment tools/make_trl_step_reference.py runs in: TRL and the exact versions
# the committed fixtures in tests/data/trl-steps were made with (CPU-only torch).
#
#   tools/trl_steps/setup_venv.sh            # venv at .venv-trl (git-ignored), or at $TRL_VENV
#   .venv-trl/bin/python tools/make_trl_step_reference.py --out tests/data/trl-steps
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${TRL_VENV:-.venv-trl}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# torch first and pinned, so TRL's requirement does not pull another build (where PyPI serves only the
# CUDA build of 2.13.0 that works too, on the CPU, just larger)
"$VENV/bin/pip" install "torch==2.13.0"
"$VENV/bin/pip" install "trl==1.16.0" "transformers==5.24.0" "accelerate==1.15.0" "datasets==5.2.0" \
  "tokenizers==0.23.3" "safetensors==0.8.0" "huggingface_hub==2.4.0" "numpy==2.4.6" "h5py==3.16.0"
"$VENV/bin/python" -c "import trl, transformers, torch; print('trl', trl.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
