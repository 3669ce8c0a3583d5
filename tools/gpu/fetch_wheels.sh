#!/usr/bin/env bash
# Downloads (here, where pip reaches PyPI) the Python wheels the GPU machine lacks for the side-by-side
# with TRL (tools/gpu/compare_trl.sh): TRL 1.16 and `datasets`, with the pure-Python packages they need
# that the machine's python3 does not have (it has torch, transformers, accelerate, pyarrow, pandas,
# ...: /work/.library/device/KINDS.md lists them). They go into .gpu-deps/wheels/ (git-ignored, beside
# fetch_deps.sh's Debian packages); the device run carries .gpu-deps and compare_trl.sh installs them
# with pip --no-index --no-deps --target into a scratch folder on PYTHONPATH (no network there).
#
# Checks here, before any device time is spent: every requirement of every wheel is either one of the
# wheels or a package the machine has (DEVICE_HAS below), and what travels (the tree, tracked and
# untracked-not-ignored files, plus .gpu-deps) stays under the run tool's 64 MiB; it prints the
# wheels with sizes and the total, and exits 1 when over. It also records the commit the carried
# tree is at (.gpu-deps/source-commit): the device copy has no .git, and the results JSON names it.
#
#   tools/gpu/fetch_wheels.sh             # for the GPU machine's Python 3.12
#   GPU_PYTHON_VERSION=3.11 WHEELS_DIR=/tmp/w tools/gpu/fetch_wheels.sh   # for another Python (a local try)
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root_dir"
say() { printf 'fetch_wheels: %s\n' "$*"; }

# pinned: the versions the side-by-side was written against (TRL 1.16 is the reference the trainer follows)
WHEELS=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)
# what the GPU machine's python3 already has that the wheels above need (KINDS.md's package list)
DEVICE_HAS="accelerate filelock fsspec huggingface-hub jinja2 numpy packaging pandas psutil pyarrow pyyaml requests
            tqdm transformers torch xxhash"
python_version=${GPU_PYTHON_VERSION:-3.12}
out=${WHEELS_DIR:-$root_dir/.gpu-deps/wheels}
limit_mib=64

rm -rf "$out" && mkdir -p "$out"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$python_version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$out" "${WHEELS[@]}" 2>&1 | grep -v "^WARNING: Location" || true
[ "$(ls "$out"/*.whl 2>/dev/null | wc -l)" -eq ${#WHEELS[@]} ] ||
  { say "error: expected ${#WHEELS[@]} wheels in $out, got: $(ls "$out")" >&2; exit 1; }

# every requirement is met there (tools/gpu/check_wheels.py)
python3 tools/gpu/check_wheels.py "$out" "$DEVICE_HAS"

for w in "$out"/*.whl; do printf 'fetch_wheels:   %8.2f MiB  %s\n' "$(du -b "$w" | awk '{print $1 / 1048576}')" "$(basename "$w")"; done
say "wheels: $(du -cb "$out"/*.whl | tail -1 | awk '{printf "%.2f", $1 / 1048576}') MiB in $out"

if git rev-parse --git-dir >/dev/null 2>&1; then
  commit=$(git rev-parse HEAD)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit (with uncommitted changes)"
  mkdir -p .gpu-deps && echo "$commit" > .gpu-deps/source-commit
  say "source commit: $commit (.gpu-deps/source-commit)"
fi

# what the run tool sends: the tracked and untracked-not-ignored files, plus the carried .gpu-deps
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | python3 -c '
import os, sys
print(sum(os.path.getsize(p) for p in sys.stdin.buffer.read().split(b"\0") if p and os.path.isfile(p)))')
deps_bytes=$(du -sb .gpu-deps 2>/dev/null | cut -f1)
total_bytes=$((tree_bytes + ${deps_bytes:-0}))
awk -v t="$tree_bytes" -v d="${deps_bytes:-0}" -v s="$total_bytes" -v l="$limit_mib" 'BEGIN {
  printf "fetch_wheels: carried: tree %.1f MiB + .gpu-deps %.1f MiB = %.1f MiB (limit %d MiB)\n", t / 1048576, d / 1048576, s / 1048576, l }'
if [ "$total_bytes" -gt $((limit_mib * 1024 * 1024)) ]; then
  say "error: over the run tool's $limit_mib MiB: the device run would be refused" >&2
  exit 1
fi
