#!/usr/bin/env bash
# The profiler summaries (include/rayless/runtime/op_profile.h) against what the profiled runs did:
#  1. rayless-bench generation --profile: the engine's EOS test (aten::isin, once per decode step, no
#     other caller) counted as many times as the run's decode steps; the top-level operators' times,
#     nested calls left out, add up to no more than the time recorded.
#     With --cpu-runs-table cuda, the CUDA backend's kernels in the profile (its fused RMSNorm).
#  2. rayless train --profile-step 2 (1 rank): one generation and one training pass inside the window
#     (isin once per decode step of step 2's generation, which runs to completions/max_length with
#     every row in a slot; autograd's backward nodes); steps 1 and 3 outside it.
#  3. 2 ranks: one file per rank; a step the run never reaches: a warning, no file; --profile-step -1: exit 2.
#   op_profile.sh RAYLESS RAYLESS_BENCH
set -euo pipefail
rayless=$1 bench=$2
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bench" generation --rows 3 --tokens 6 --short 2 --engines new --sync-intervals 1,4 --repeats 1 \
  --profile "$work/bench" --json "$work/bench.json" > "$work/bench.out" 2>&1 || { cat "$work/bench.out"; fail "rayless-bench generation --profile"; }
python3 - "$work/bench.json" <<'PY' || exit 1
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert len(runs) == 2, runs
for run in runs:
    profile = json.load(open(run["profile"]["file"]))
    ops = {o["name"]: o for o in profile["top_level_operators"]}
    isin = ops.get("aten::isin", {}).get("calls", 0)
    print(f"bench, {run['engine']}: {run['decode_steps']} decode steps, aten::isin {isin} calls; "
          f"top-level operators {profile['top_level_operators_ms']:.2f} ms of {profile['recorded_ms']:.2f} recorded")
    assert profile["steps"] == run["decode_steps"], (profile["steps"], run["decode_steps"])
    assert isin == run["decode_steps"], f"aten::isin {isin} calls, {run['decode_steps']} decode steps"
    assert profile["top_level_operators_ms"] <= profile["recorded_ms"], "nested operators counted twice"
    assert sum(o["calls"] for o in profile["top_level_operators"]) < profile["host_operator_calls"]
PY

# --cpu-runs-table cuda: the CUDA backend's kernels counted on the CPU (its RMSNorm is LibTorch's fused one)
"$bench" generation --rows 2 --tokens 3 --engines new --sync-intervals 1 --repeats 1 --cpu-runs-table cuda \
  --profile "$work/bench-cuda" --json "$work/bench-cuda.json" > "$work/bench-cuda.out" 2>&1 || { cat "$work/bench-cuda.out"; fail "--cpu-runs-table cuda"; }
python3 - "$work/bench.json" "$work/bench-cuda.json" <<'PY' || exit 1
import json, sys
def fused_norms(path):
    run = json.load(open(path))["runs"][0]
    ops = {o["name"]: o["calls"] for o in json.load(open(run["profile"]["file"]))["top_level_operators"]}
    return ops.get("aten::_fused_rms_norm", 0)
cpu, cuda = fused_norms(sys.argv[1]), fused_norms(sys.argv[2])
print(f"bench: aten::_fused_rms_norm {cpu} calls on the CPU's table, {cuda} on the CUDA backend's")
assert cpu == 0 and cuda > 0
PY

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
train() {
  local out=$1; shift
  "$rayless" train --config configs/demo.toml --output "$out" --set train.max_steps=3 --set checkpoint.save_steps=0 "$@"
}
train "$work/one" --profile-step 2 > "$work/one.log" 2>&1 || { cat "$work/one.log"; fail "train --profile-step 2"; }
grep -q "step 2 profile: 1 step in" "$work/one.log" || { cat "$work/one.log"; fail "no profile line for step 2"; }
ls "$work/one/profile" | grep -qx "step-2-rank-0.json" || fail "profile/ holds $(ls "$work/one/profile")"
[ "$(ls "$work/one/profile" | wc -l)" = 1 ] || fail "profile/ holds $(ls "$work/one/profile")"
python3 - "$work/one" <<'PY' || exit 1
import json, sys
run = sys.argv[1]
profile = json.load(open(f"{run}/profile/step-2-rank-0.json"))
step2 = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if json.loads(l)["step"] == 2][0]
ops = {o["name"]: o["calls"] for o in profile["top_level_operators"]}
isin = ops.get("aten::isin", 0)
backward = sum(c for name, c in ops.items() if name.startswith("autograd::engine::evaluate_function:"))
print(f"train, step 2: aten::isin {isin} calls, completions/max_length {step2['completions/max_length']:.0f}; "
      f"{backward} backward nodes")
assert profile["optimizer_step"] == 2 and profile["rank"] == 0 and profile["steps"] == 1, profile
assert isin == step2["completions/max_length"], "not one whole generation in the window"
assert backward > 0, "no training pass in the window"
PY

mpirun -np 2 "$rayless" train --config configs/demo.toml --output "$work/two" --set train.max_steps=2 \
  --set checkpoint.save_steps=0 --profile-step 1 > "$work/two.log" 2>&1 || { cat "$work/two.log"; fail "np 2"; }
[ "$(ls "$work/two/profile" | tr '\n' ' ')" = "step-1-rank-0.json step-1-rank-1.json " ] || fail "np 2: profile/ holds $(ls "$work/two/profile")"

train "$work/past" --set train.max_steps=1 --profile-step 5 > "$work/past.log" 2>&1 || fail "a step past the run"
grep -q "warning: --profile-step 5: this run worked on steps 1 to 1, not on that one: nothing profiled" "$work/past.log" \
  || { cat "$work/past.log"; fail "no warning for a step past the run"; }
[ ! -e "$work/past/profile" ] || fail "a profile for a step past the run"
rc=0
"$rayless" train --config configs/demo.toml --output "$work/bad" --profile-step -1 > "$work/bad.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l < "$work/bad.log")" = 1 ] && grep -q -- "--profile-step -1 is not allowed" "$work/bad.log" \
  || { cat "$work/bad.log"; fail "--profile-step -1: exit $rc"; }
[ ! -e "$work/bad" ] || fail "--profile-step -1 made the run directory"
echo "PASS: profiles hold what the runs did"
