#!/usr/bin/env bash
# Creates .venv-tools/ with TensorBoard, which tests/trainer/tensorboard_reader.py uses to check that
# rayless's event files load in TensorBoard itself, and PEFT (with torch and transformers, pinned to the
# versions tests/data/lora-golden was made with), which tests/trainer/lora_peft_roundtrip.py uses to
# load rayless's LoRA adapters in PEFT, and TRL (the version tools/gpu/fetch_wheels.sh carries to the
# GPU machine), which the CPU dry run of the GPU side-by-side runs (tests/devices/compare_trl_dry_run.sh).
# Idempotent. Always exits 0: without network the
# install fails, and the tests that need it then skip (exit 77) rather than fail.
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root_dir/.venv-tools"

say() { printf 'setup_tools_venv: %s\n' "$*"; }
warn() { printf 'setup_tools_venv: warning: %s\n' "$*" >&2; }

if [[ -x "$venv/bin/python" ]]; then
  say "using existing $venv"
else
  if ! python3 -m venv "$venv"; then
    warn "python3 -m venv $venv failed (Debian: apt-get install python3-venv); TensorBoard tests will skip"
    exit 0
  fi
  say "created $venv"
fi

if "$venv/bin/python" -c 'import tensorboard' 2>/dev/null; then
  say "tensorboard $("$venv/bin/python" -c 'import tensorboard; print(tensorboard.__version__)') already installed"
elif "$venv/bin/python" -m pip install --quiet --disable-pip-version-check tensorboard; then
  say "installed tensorboard $("$venv/bin/python" -c 'import tensorboard; print(tensorboard.__version__)')"
else
  warn "pip install tensorboard failed; TensorBoard tests will skip"
fi

# torch first and pinned, so PEFT's requirement does not pull another build
peft_check='import peft, transformers, torch; print("peft", peft.__version__, "transformers", transformers.__version__, "torch", torch.__version__)'
if "$venv/bin/python" -c "$peft_check" 2>/dev/null; then
  say "$("$venv/bin/python" -c "$peft_check") already installed"
elif "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==2.13.0" &&
     "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "transformers==5.24.0" "peft==0.21.2"; then
  say "installed $("$venv/bin/python" -c "$peft_check")"
else
  warn "pip install peft failed; the PEFT round-trip test will skip"
fi

# after PEFT, so that the transformers and torch pinned above stay
trl_check='import trl, datasets; print("trl", trl.__version__, "datasets", datasets.__version__)'
if "$venv/bin/python" -c "$trl_check" 2>/dev/null; then
  say "$("$venv/bin/python" -c "$trl_check") already installed"
elif "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "trl==1.16.0" "datasets==5.2.0"; then
  say "installed $("$venv/bin/python" -c "$trl_check")"
else
  warn "pip install trl failed; the GPU side-by-side's dry run will check TRL's arguments only"
fi
exit 0
