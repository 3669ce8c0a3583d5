# Shared by the fault-injection tests (tests/faults/*.sh): sourced, not run.
# Every process a test starts carries RAYLESS_FAULTS_TAG=<its work directory> in its environment, so
# the test finds its own ranks (/proc/PID/environ) and can prove none is left, without matching names.
set -uo pipefail
: "${OMPI_ALLOW_RUN_AS_ROOT:=1}" "${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:=1}"
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
export OMPI_MCA_rmaps_base_oversubscribe=1
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$src" || exit 1

# the run every test compares with, and its arguments (μ = 2, a checkpoint after every step)
FAULTS_NP=2
FAULTS_ARGS=(--config configs/ci-small.toml --set grpo.num_iterations=2 --set checkpoint.save_steps=1
             --set train.max_steps=8 --set checkpoint.keep_last=3 --set log.logging_steps=1)

fail() { echo "FAIL: $*"; exit 1; }
note() { echo "--- $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# a <= b for decimals
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# make_work NAME: a fresh work directory; it is the tag of every process started from here on
make_work() {
  work=$(mktemp -d "/tmp/rayless-faults-$1.XXXXXX")
  export RAYLESS_FAULTS_TAG=$work
  trap cleanup EXIT
}
cleanup() {
  local pids
  pids=$(tagged_pids)
  if [ -n "$pids" ]; then
    echo "cleanup: killing leftover processes $pids"
    kill -CONT $pids 2>/dev/null
    kill -KILL $pids 2>/dev/null
  fi
  if [ -n "${FAULTS_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}

# PIDs of live processes carrying this test's tag (zombies excluded); with RANK, only that MPI rank
tagged_pids() {
  local want=${1:-} f p state
  for f in $(grep -lzxF "RAYLESS_FAULTS_TAG=$work" /proc/[0-9]*/environ 2>/dev/null); do
    p=${f#/proc/}; p=${p%/environ}
    state=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) || continue
    [ -z "$state" ] || [ "$state" = "Z" ] && continue
    if [ -n "$want" ]; then
      grep -qzx "OMPI_COMM_WORLD_RANK=$want" "/proc/$p/environ" 2>/dev/null || continue
    fi
    # processes of this script's own pipelines (bash, awk, ...) carry the tag too: only our launches
    case "$(readlink "/proc/$p/exe" 2>/dev/null)" in
      */rayless|*/mpirun|*/orterun|*/orted|*/prterun|*/prted) echo -n "$p " ;;
    esac
  done
}

# no_leftovers WITHIN_S: waits up to WITHIN_S seconds for every tagged process to be gone
no_leftovers() {
  local deadline left p
  deadline=$(awk -v a="$(now)" -v b="$1" 'BEGIN { print a + b }')
  while :; do
    left=$(tagged_pids)
    [ -z "$left" ] && return 0
    if ! le "$(now)" "$deadline"; then
      for p in $left; do
        echo "left after $1 s: pid $p ppid $(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) state $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" \
             "exe $(readlink "/proc/$p/exe" 2>/dev/null) rank $(grep -az '^OMPI_COMM_WORLD_RANK=' "/proc/$p/environ" 2>/dev/null | tr -d '\0' | cut -d= -f2)"
      done
      return 1
    fi
    sleep 0.2
  done
}

# train NP OUT [ARGS...]: one `rayless train` job in the foreground; its exit code
train() {
  local np=$1 out=$2; shift 2
  mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${FAULTS_ARGS[@]}" --output "$out" "$@"
}

# train_bg NP OUT LOG [ARGS...]: the same in the background (mpirun in its own session); sets job_pid
# (Open MPI 4.1 puts every rank in a process group of its own: kill_job, not kill -- -PGID, reaches them)
train_bg() {
  local np=$1 out=$2 log=$3; shift 3
  setsid mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${FAULTS_ARGS[@]}" --output "$out" "$@" \
    > "$log" 2>&1 &
  job_pid=$!
}

# kill_job: SIGKILL to mpirun and every rank at once (a lost node), then reaps mpirun; sets job_rc
# (repeated: a rank mpirun forked a moment before has no tag-visible exe yet and would survive it)
kill_job() {
  local pids i
  for i in $(seq 50); do
    pids=$(tagged_pids)
    [ -z "$pids" ] && break
    kill -KILL $pids 2>/dev/null
    sleep 0.05
  done
  wait "$job_pid"; job_rc=$?
}

# wait_for_job_end T0 BOUND_S: until the background job (job_pid) has ended, at most BOUND_S seconds
# after T0 (from now); sets ended to the seconds since T0, or "" if it is still running
wait_for_job_end() {
  local t0=$1 bound=$2
  ended=""
  while le "$(elapsed "$t0")" "$bound"; do
    if ! kill -0 "$job_pid" 2>/dev/null; then ended=$(elapsed "$t0"); return 0; fi
    sleep 0.1
  done
  return 1
}

# wait_for_step DIR N [TIMEOUT_S]: until metrics.jsonl has step N (or the job ended: 1)
wait_for_step() {
  local dir=$1 n=$2 limit=${3:-240} i
  for i in $(seq $((limit * 10))); do
    if [ -s "$dir/metrics.jsonl" ] && grep -q "\"step\":$n[,}]" "$dir/metrics.jsonl"; then return 0; fi
    kill -0 "$job_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

latest_name() { tr -d ' \n\r\t' < "$1/checkpoints/latest" 2>/dev/null; }

# check_checkpoints OUT: `latest` names a complete checkpoint (trainer_state.json, model, optimizer)
# whose model loads; every other step-* directory is complete too (renamed into place whole, and
# renamed away before it is deleted). Prints the name.
check_checkpoints() {
  local out=$1 name dir d
  name=$(latest_name "$out") || fail "no checkpoints/latest in $out"
  [ -n "$name" ] || fail "checkpoints/latest is empty"
  dir=$out/checkpoints/$name
  [ -f "$dir/trainer_state.json" ] || fail "latest names $name, which has no trainer_state.json (partial)"
  for f in model.safetensors optimizer.pt config.json; do
    [ -s "$dir/$f" ] || fail "latest checkpoint $name lacks $f"
  done
  "$rayless" generate --model "$dir" --prompt hi --max-new-tokens 1 --greedy > "$work/generate.log" 2>&1 ||
    { cat "$work/generate.log"; fail "latest checkpoint $name does not load"; }
  python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$dir/trainer_state.json" ||
    fail "$name/trainer_state.json is not JSON"
  for d in "$out"/checkpoints/step-*; do
    [ -d "$d" ] || continue
    if [ -f "$d/trainer_state.json" ] && [ -f "$d/model.safetensors" ] && [ -f "$d/optimizer.pt" ]; then continue; fi
    fail "$(basename "$d") is not a complete checkpoint (latest: $name); it holds: $(ls "$d" | tr '\n' ' ')"
  done
  echo "$name"
}

# check_store OUT: every step file, rank file and the index is a whole HDF5 file; inspect reads all
check_store() {
  local out=$1 f n=0
  [ -d "$out/rollouts" ] || return 0
  while IFS= read -r f; do
    h5dump "$f" > /dev/null 2>&1 || fail "torn HDF5 file in the store: $f (h5dump cannot read it)"
    n=$((n + 1))
  done < <(find "$out/rollouts" -name '*.h5' ! -name '.*')
  if [ -f "$out/rollouts/index.h5" ]; then
    "$rayless" inspect "$out/rollouts" > "$work/inspect.log" 2>&1 ||
      { cat "$work/inspect.log"; fail "rayless inspect $out/rollouts failed"; }
  fi
  echo "store: $n HDF5 files whole$(find "$out/rollouts" -name '.*.tmp.*' | sed -n '1s/.*/, leftover temporary files (ignored by readers)/p')"
}

# same_weights OUT: the final model equals the reference run's, byte for byte
same_weights() {
  local out=$1 a b
  a=$(latest_name "$reference"); b=$(latest_name "$out")
  [ "$a" = "$b" ] || fail "final checkpoints differ: reference $a, faulted run $b"
  cmp "$reference/checkpoints/$a/model.safetensors" "$out/checkpoints/$b/model.safetensors" ||
    fail "$b/model.safetensors differs from the uninterrupted run's"
  echo "PASS: $b/model.safetensors identical to the uninterrupted run's"
}

# steps_once OUT: metrics.jsonl has every step exactly once, in order (a resumed run drops the lines
# past its checkpoint)
steps_once() {
  python3 - "$1/metrics.jsonl" <<'PY' || fail "metrics.jsonl"
import json, sys
steps = []
for n, line in enumerate(open(sys.argv[1]), 1):
    if line.strip():
        try:
            steps.append(json.loads(line)["step"])
        except Exception as e:
            sys.exit(f"metrics.jsonl:{n}: not a JSON line ({e}): {line[:80]!r}")
if steps != list(range(1, len(steps) + 1)):
    sys.exit(f"metrics.jsonl steps {steps}")
print("metrics.jsonl: steps", steps[0], "..", steps[-1], "once each")
PY
}

# ensure_reference: the uninterrupted run in $reference (made here when missing: a test run alone);
# sets reference_s, its wall time
ensure_reference() {
  if [ ! -f "$reference/wall_s" ]; then
    note "reference run (uninterrupted) in $reference"
    rm -rf "$reference"
    local t0; t0=$(now)
    train "$FAULTS_NP" "$reference" > "$work/reference.log" 2>&1 || { cat "$work/reference.log"; fail "the uninterrupted run failed"; }
    elapsed "$t0" > "$reference/wall_s"
  fi
  reference_s=$(cat "$reference/wall_s")
  echo "reference: $(latest_name "$reference"), uninterrupted run took ${reference_s} s"
}
