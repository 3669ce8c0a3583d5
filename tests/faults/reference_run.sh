#!/usr/bin/env bash
# The uninterrupted run the fault tests compare with (a ctest fixture): np 2, configs/ci-small.toml,
# μ = 2, a checkpoint after every step, 8 steps. usage: reference_run.sh RAYLESS DIR
rayless=$1; reference=$2
source "$(dirname "$0")/lib.sh"
make_work reference
rm -rf "$reference"
ensure_reference
