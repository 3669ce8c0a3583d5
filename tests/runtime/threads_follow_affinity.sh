#!/usr/bin/env bash
# distributed.threads_per_rank = 0 takes the cores the rank is bound to (what srun --cpus-per-task or
# mpirun --bind-to gives it), and, for a rank bound to nothing, the node's cores / ranks on the node.
# The start line says which: "rayless train: 1 rank(s) x N thread(s) on ...".
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-threads.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
cores=$(nproc --all)
threads_of() {  # prints the thread count of a 1-step run started by "$@"
  "$@" "$rayless" train --config configs/ci-small.toml --output "$work/run" --set train.max_steps=1 \
    --set distributed.threads_per_rank=0 > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  rm -rf "$work/run"
  sed -n 's/.*rank(s) x \([0-9]*\) thread(s).*/\1/p' "$work/log" | head -1
}
bound=$(threads_of taskset -c 0)
echo "bound to core 0: $bound thread(s)"
[ "$bound" = 1 ] || { echo "FAIL: a rank bound to one core must run 1 thread, got '$bound'"; exit 1; }
unbound=$(threads_of env)
echo "unbound, $cores core(s): $unbound thread(s)"
[ "$unbound" = "$cores" ] || { echo "FAIL: an unbound single rank must take all $cores cores, got '$unbound'"; exit 1; }
if [ "$cores" -ge 2 ]; then
  two=$(threads_of taskset -c 0,1)
  echo "bound to cores 0,1: $two thread(s)"
  if [ "$cores" -gt 2 ]; then
    [ "$two" = 2 ] || { echo "FAIL: a rank bound to 2 of $cores cores must run 2 threads, got '$two'"; exit 1; }
  fi
fi
