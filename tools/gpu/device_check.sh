#!/usr/bin/env bash
# First contact with a GPU, as one prepared run: builds rayless with CUDA + NCCL against the machine's
# LibTorch, runs the CUDA-vs-CPU and NCCL-vs-MPI tests, trains a Qwen2.5-0.5B-shaped random model on the
# GPU (bf16, fused log-probs, mu = 2, top_entropy_quantile = 0.2), stops it with SIGUSR1 and resumes it,
# checks the run's peak GPU memory metrics, and measures sampling/training tokens/s, the log-prob pass and a bf16 matmul for reference. Every step
# is timed and logged; a failing step is recorded and the next one still runs. Everything lands in
# $OUT (default gpu-check-out/): device_check.log, steps.tsv, figures.json, metrics.jsonl (the training
# run's), profile-train-step-2.json (its step 2 under LibTorch's profiler), gpu_memory_mib.txt. The model and the run's checkpoints (gigabytes) go to $WORK (default
# $OUT/work), which the device run points outside $OUT so that only the small files come back.
#
#   tools/gpu/fetch_deps.sh                           # here: the Debian packages the device lacks
#   run (carry .gpu-deps): WORK=/tmp/gpu-check tools/gpu/device_check.sh   # on the GPU machine, < 9 minutes
#   tools/gpu/device_check.sh --dry-run               # here, on the CPU: the same steps with the
#                                                     # existing build/ and the tiny model (ctest
#                                                     # "gpu-device-check-dry-run" runs it)
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root_dir"
. tools/gpu/gpu_env.sh
gpu_script_args "tools/gpu/device_check.sh [--dry-run [--no-build]]" 0 "$@"
OUT=${OUT:-$root_dir/gpu-check-out}
WORK=${WORK:-$OUT/work}
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/device_check.log") 2>&1
: > "$OUT/steps.tsv"
start_all=$(date +%s)
say() { printf 'device-check: %s\n' "$*"; }
# step NAME COMMAND...: runs it, records name, exit code and seconds
step() {
  local name=$1; shift
  say "---- $name: $*"
  local t0=$(date +%s.%N) rc
  "$@"
  rc=$?
  local seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\n' "$name" "$rc" "$seconds" >> "$OUT/steps.tsv"
  say "---- $name: exit $rc in $seconds s"
  return 0
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# ---- 0. the environment: carried packages, CUDA and NCCL (tools/gpu/gpu_env.sh) -----------------

versions() {
  ldd --version | head -1; cmake --version | head -1; c++ --version | head -1
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  command -v nvcc >/dev/null && nvcc --version | tail -2
  python3 -c 'import torch; print("python torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>/dev/null
  "$build_dir/rayless" version
  echo "cpu: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); bfloat16 units: $(grep -o -w -m1 -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
}

if [ $dry_run = 1 ]; then
  say "dry run on the CPU: build/, tiny model, float32"
  build_dir=build device=cpu dtype=float32 model_json=tools/bench/models/tiny.json steps=2 bench_model=tiny logprob_sizes=small
  variant_args=(--set train.max_steps=1 --set generation.max_completion_length=16)
  # the same steps at a quarter of the work: the dry run proves the script, the main lane the numbers
  size_args=(--set generation.max_completion_length=32 --set grpo.num_generations=4 --set train.per_device_train_batch_size=8)
  profile_tokens=32
  [ $build = 1 ] && step build ./tools/setup.sh
else
  build_dir=build-gpu device=cuda dtype=bfloat16 model_json=tools/bench/models/qwen2.5-0.5b.json steps=4 bench_model=0.5b
  variant_args=(--set train.max_steps=2)
  size_args=() profile_tokens=128
  logprob_sizes=large
  step deps use_carried_packages
  step cuda use_cuda_and_nccl
  # only what the steps below run
  step build build_for_gpu "$build_dir" rayless rayless-bench rayless-refcheck rayless-op-times test-devices test-devices-mpi test-comm-mpi \
    test-model test-sampler
fi
step versions versions

# ---- 1. backends and models against the CPU ------------------------------------------------------
# one GPU: NCCL refuses two ranks on one device, so the NCCL tests run at np 1 (they say so at np > 1)
# every command under a time limit: a hang in one (an NCCL init, say) must not use up the device run
step nccl-vs-mpi timeout 120 mpirun -np 1 "$build_dir/tests/test-devices-mpi"
step cuda-vs-cpu timeout 180 "$build_dir/tests/test-devices"
step comm-np2 timeout 120 mpirun -np 2 "$build_dir/tests/test-comm-mpi"
step refcheck timeout 180 ctest --test-dir "$build_dir" -R "^grpo-refcheck" --output-on-failure --no-tests=error
step refcheck-device timeout 120 "$build_dir/rayless-refcheck" --device "$device" tests/data/trl-reference
step golden timeout 300 ctest --test-dir "$build_dir" -R "^(model|sampler):golden" --output-on-failure --no-tests=error

# ---- 2. train on the device, stop with SIGUSR1, resume ------------------------------------------
model_dir=$WORK/model run_dir=$WORK/run
rm -rf "$model_dir" "$run_dir" "$WORK"/variant-*
step init-model timeout 120 "$build_dir/rayless-bench" init-model --config-json "$model_json" --out "$model_dir"
train_args=(--config configs/demo.toml --set "model.path=\"$model_dir\"" --set model.device="$device" --set model.dtype="$dtype"
            --set train.bf16=false --set grpo.num_iterations=2 --set grpo.top_entropy_quantile=0.2
            --set generation.max_completion_length=128 --set grpo.num_generations=8 --set train.per_device_train_batch_size=16
            --set checkpoint.save_steps=1000 --set log.logging_steps=1 "${size_args[@]}")
train_until_signal() {
  # not under timeout(1): it would take the SIGUSR1 itself; a watchdog ends a run that ignores it
  "$build_dir/rayless" train "${train_args[@]}" --output "$run_dir" --set train.max_steps=100 &
  local pid=$! i
  for ((i = 0; i < 600; i++)); do
    [ "$(wc -l < "$run_dir/metrics.jsonl" 2>/dev/null || echo 0)" -ge "$steps" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  kill -USR1 $pid 2>/dev/null
  # away from stdout, or the pipe that collects this script's output would wait for its sleep
  (exec >/dev/null 2>&1; sleep 120; kill -9 $pid) &
  local watchdog=$!
  wait $pid
  local rc=$?
  pkill -P $watchdog 2>/dev/null
  kill $watchdog 2>/dev/null
  say "train exited $rc after SIGUSR1 (3 = checkpointed)"
  [ $rc -eq 3 ]
}
# the GPU's memory as nvidia-smi sees it (the CUDA context and the caching allocator's reserve
# included), sampled every 200 ms while the two training runs go; its largest value goes in figures.json
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$OUT/gpu_memory_mib.txt" 2>/dev/null &
  gpu_memory_sampler=$!
fi
step train-signal train_until_signal
resume_once() {
  local done_steps=$(wc -l < "$run_dir/metrics.jsonl")
  timeout 120 "$build_dir/rayless" train "${train_args[@]}" --output "$run_dir" --set "train.max_steps=$((done_steps + 1))" --resume auto
}
step train-resume resume_once
[ -n "${gpu_memory_sampler:-}" ] && kill "$gpu_memory_sampler" 2>/dev/null
# rayless's own peak GPU memory (memory/gpu_peak_allocated_mb and _reserved_mb, the caching allocator's
# counters) in every step of the run and in its closing line: on CUDA 0 < allocated <= reserved <= the
# GPU's memory (the resumed process starts its peaks anew, so they may fall between steps); on the CPU
# neither is there
gpu_memory_metrics() {
  local total_mib=0
  [ "$device" = cuda ] && total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  python3 - "$run_dir/metrics.jsonl" "$device" "$total_mib" "$OUT/device_check.log" <<'PY'
import json, sys
metrics, device, total_mib, log = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
rows = [json.loads(line) for line in open(metrics) if line.strip()]
keys = ("memory/gpu_peak_allocated_mb", "memory/gpu_peak_reserved_mb")
closing = [line for line in open(log) if "rayless train: done" in line]
problems = []
if device == "cuda":
    last = (0.0, 0.0)
    for r in rows:
        allocated, reserved = (r.get(k) for k in keys)
        if allocated is None or reserved is None:
            problems.append(f"step {r['step']}: no {' / '.join(keys)}")
            continue
        if not 0 < allocated <= reserved <= total_mib:
            problems.append(f"step {r['step']}: not 0 < allocated {allocated:.0f} <= reserved {reserved:.0f} <= {total_mib:.0f} MiB")
        last = (allocated, reserved)
    if not any("peak GPU memory" in line for line in closing):
        problems.append("the closing line does not name the peak GPU memory")
    print(f"gpu memory: {len(rows)} steps, last peak {last[0]:.0f} MiB allocated, {last[1]:.0f} MiB reserved of {total_mib:.0f}")
else:
    problems += [f"step {r['step']}: {k} on the CPU" for r in rows for k in keys if k in r]
    problems += ["the closing line names GPU memory on the CPU" for line in closing if "GPU" in line]
    print(f"gpu memory: none reported on the CPU ({len(rows)} steps, {len(closing)} closing line(s))")
if not rows or not closing:
    problems.append(f"nothing to check: {len(rows)} metrics rows, {len(closing)} closing lines")
for p in problems:
    print("gpu memory: FAIL", p)
sys.exit(1 if problems else 0)
PY
}
step gpu-memory-metrics gpu_memory_metrics

# the other training paths, a short run each: the reference model's pass (beta > 0), LoRA, gradient
# checkpointing, the padded log-prob layout, and bfloat16 autocast over float32 weights (TRL's default)
train_variant() {
  local name=$1; shift
  timeout 240 "$build_dir/rayless" train "${train_args[@]}" --output "$WORK/variant-$name" "${variant_args[@]}" "$@"
}
step train-beta train_variant beta --set grpo.beta=0.04
step train-lora train_variant lora --set lora.enabled=true
step train-checkpointing train_variant checkpointing --set train.gradient_checkpointing=true
step train-padded train_variant padded --set train.padding_free=false
step train-autocast train_variant autocast --set model.dtype=float32 --set train.bf16=true
# where a whole step's time goes: a run of its own (2 steps, the main run's settings) with step 2 under
# LibTorch's profiler (docs/gpu.md, Profiling), apart from the main run so that a profiler that cannot
# start or hangs costs only this step; the headline: the device's busy share, kernels and host waits
train_profile() {
  timeout 150 "$build_dir/rayless" train "${train_args[@]}" --output "$WORK/variant-profile" --set train.max_steps=2 \
    --profile-step 2 || return 1
  cp "$WORK/variant-profile/profile/step-2-rank-0.json" "$OUT/profile-train-step-2.json" || return 1
  python3 - "$OUT/profile-train-step-2.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
first = (p.get("top_kernels") or p["top_level_operators"])[:3]
busy = f", device busy {100 * p['device_busy_share']:.0f} %, {p['kernels_per_step']:.0f} kernels, {p['host_waits_per_step']:.0f} host waits" \
    if "device_busy_share" in p else ""
print(f"train step 2: {p['recorded_ms']:.0f} ms recorded{busy}, {p['host_operator_calls_per_step']:.0f} host operators; first: "
      + "; ".join(f"{f['name'][:60]} {100 * f['share']:.0f} %" for f in first))
PY
}
step train-profile train_profile

# ---- 3. measurements ------------------------------------------------------------------------------
# where one generation's host time goes, by ATen operator (tools/profile/op_times.cpp, preloaded):
# 128 tokens for one prompt (32 in the dry run); on a GPU the operators that wait for it absorb its time
profile_generation() {
  [ -f "$build_dir/librayless-op-times.so" ] || cmake --build "$build_dir" --target rayless-op-times || return 1
  OP_TIMES_AT_EXIT=1 LD_PRELOAD=$build_dir/librayless-op-times.so timeout 180 "$build_dir/rayless" generate --model "$model_dir" \
    --tokenizer byte --prompt "The first GPU run of rayless" --max-new-tokens "$profile_tokens" --device "$device" --dtype "$dtype" \
    > /dev/null
}
step profile-generation profile_generation
step bench-model timeout 120 "$build_dir/rayless-bench" model --model "$bench_model" --device "$device"
# (the log-prob bench measures host memory: on the GPU machine it times the CPU pass; see docs/benchmarks.md)
step bench-logprobs timeout 120 "$build_dir/rayless-bench" logprobs --sizes "$logprob_sizes" --methods selective,fused
matmul() {
  python3 - "$device" <<'PY'
import sys, time
try:
    import torch
except ImportError:
    print("matmul: skipped (no torch in python3)"); sys.exit(0)
device = sys.argv[1]
if device != "cuda" or not torch.cuda.is_available():
    print("matmul: skipped (no CUDA device)"); sys.exit(0)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.time()
for _ in range(10): a @ b
torch.cuda.synchronize()
print(f"matmul bf16 8192^3: {10 * 2 * 8192**3 / (time.time() - t) / 1e12:.0f} TFLOP/s")
PY
}
step matmul matmul

# ---- 4. figures ------------------------------------------------------------------------------------
cp "$run_dir/metrics.jsonl" "$OUT/metrics.jsonl" 2>/dev/null
# LibTorch's error backtraces name rayless's own frames only by offset: add function and line
symbolize() {
  local offsets
  offsets=$(grep -o -E '\+ 0x[0-9a-f]+ \(0x[0-9a-f]+ in [^)]*rayless[^)]*\)' "$OUT/device_check.log" | awk '{print $2}' | sort -u | head -40)
  [ -z "$offsets" ] && return 0
  say "rayless frames in the errors above:"
  addr2line -f -C -i -p -e "$build_dir/rayless" $offsets
}
symbolize
python3 - "$OUT" "$device" <<'PY'
import json, os, sys
out, device = sys.argv[1:3]
steps = [line.rstrip("\n").split("\t") for line in open(os.path.join(out, "steps.tsv"))]
figures = {"device": device, "steps": {name: {"exit": int(rc), "seconds": float(s)} for name, rc, s in steps}}
metrics_path = os.path.join(out, "metrics.jsonl")
if os.path.exists(metrics_path):
    rows = [json.loads(l) for l in open(metrics_path) if l.strip()]
    keys = ["tokens_per_second", "time/sampling", "time/train", "step_time", "memory/peak_rss_mb", "entropy_threshold", "loss"]
    figures["train"] = [{k: r.get(k) for k in ["step"] + keys} for r in rows]
profile_path = os.path.join(out, "profile-train-step-2.json")
if os.path.exists(profile_path):  # the headline; the whole summary beside it
    profile = json.load(open(profile_path))
    first = profile.get("top_kernels") or profile["top_level_operators"]
    figures["train_step_2_profile"] = {k: profile[k] for k in ("recorded_ms", "device_busy_share", "kernels_per_step",
                                                                "host_waits_per_step", "host_operator_calls_per_step") if k in profile}
    figures["train_step_2_profile"]["first"] = [{"name": f["name"][:80], "share": f["share"]} for f in first[:5]]
memory_path = os.path.join(out, "gpu_memory_mib.txt")
if os.path.exists(memory_path):
    used = [int(v) for v in open(memory_path).read().split() if v.strip().isdigit()]
    figures["gpu_memory_used_peak_mib"] = max(used) if used else None
json.dump(figures, open(os.path.join(out, "figures.json"), "w"), indent=1)
failed = [name for name, rc, _ in steps if rc != "0"]
print("device-check: figures in", os.path.join(out, "figures.json"), "; failed steps:", failed or "none")
PY
say "done in $(( $(date +%s) - start_all )) s"
! cut -f2 "$OUT/steps.tsv" | grep -qv '^0$'
