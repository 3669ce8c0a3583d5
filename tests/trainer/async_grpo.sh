#!/usr/bin/env bash
# Asynchronous GRPO end to end (distributed.generation_ranks, grpo.async_lag; docs/distributed.md), on
# the embedded tiny model (configs/ci-small.toml, one optimizer step per generation):
#   equals-sync   np 3, 1 generation rank + 2 training ranks, lag 0, correction off: the same weights
#                 (model.safetensors, byte for byte) and metrics as a synchronous run at np 2
#   versions L K  np 3 with K generation ranks and lag L: generation g of the store (the training ranks'
#                 files and the generation ranks' rollouts/generated/) was sampled by policy version
#                 max(0, g - L); metrics log async/lag, the importance-sampling ratio, idle times
#   resume L      lag L: a run stopped by SIGUSR1 (sent to every rank, as Slurm does) and a run killed
#                 with SIGKILL (the whole job) both end, after --resume auto, in the weights of an
#                 uninterrupted run, byte for byte
#   bad-settings  generation ranks >= ranks, async_lag < 0, async_lag > 0 without generation ranks:
#                 one line, exit 2
#   stalled-generator  SIGSTOP to the generation rank after step 1: the job ends within
#                 collective_timeout_s + slack naming it; --resume auto then ends in the uninterrupted
#                 run's weights
# usage: async_grpo.sh RAYLESS SCENARIO [ARGS]
# ASYNC_BREAK=lag (shows the versions test can fail): the expected version is g - L + 1.
rayless=$1; scenario=$2; shift 2
source "$(dirname "$0")/../faults/lib.sh"
make_work "async-$scenario"
export OMP_NUM_THREADS=1
# the length reward in characters: the random model's byte tokens decode to varied lengths, so every
# generation has rewards that differ within a group and every step a gradient (counted in tokens,
# most completions run to the limit, whole generations get zero advantages, and a resume that
# resampled the generations in flight would still end in the same weights)
BASE=(--config configs/ci-small.toml --set grpo.num_iterations=1 --set grpo.steps_per_generation=1
      --set train.max_steps=6 --set checkpoint.save_steps=1 --set checkpoint.keep_last=10
      --set distributed.threads_per_rank=1 --set log.logging_steps=1 --set 'reward.length_unit="chars"')
run() {  # run NP OUT [ARGS...]: a foreground job; its output in OUT.log
  local np=$1 out=$2; shift 2
  mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${BASE[@]}" --output "$out" "$@" > "$out.log" 2>&1
}
final_weights() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest")/model.safetensors"; }
same_weights() {  # same_weights A B WHAT
  cmp -s "$(final_weights "$1")" "$(final_weights "$2")" || fail "$3: final model.safetensors differ ($(cat "$1/checkpoints/latest") vs $(cat "$2/checkpoints/latest"))"
}

case $scenario in
  equals-sync)
    run 2 "$work/sync" || { cat "$work/sync.log"; fail "synchronous run"; }
    run 3 "$work/async" --set distributed.generation_ranks=1 --set grpo.async_lag=0 \
      --set grpo.vllm_importance_sampling_correction=false || { cat "$work/async.log"; fail "async run"; }
    grep -q "asynchronous GRPO: ranks 0-1 train, rank 2 generates" "$work/async.log" || { cat "$work/async.log"; fail "no roles line"; }
    same_weights "$work/sync" "$work/async" "lag 0 vs synchronous"
    python3 - "$work/sync/metrics.jsonl" "$work/async/metrics.jsonl" <<'PY' || fail "metrics differ"
import json, math, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
assert len(a) == len(b) == 6, (len(a), len(b))
timing = ("time/", "step_time", "tokens_per_second", "memory/", "async/")
for x, y in zip(a, b):
    for k, v in x.items():
        if k.startswith(timing):
            continue
        assert k in y, f"step {x['step']}: async run lacks {k}"
        assert v == y[k] or (isinstance(v, float) and math.isnan(v) and math.isnan(y[k])), f"step {x['step']}: {k} {v} vs {y[k]}"
    assert y["async/lag"] == 0 and y["async/policy_version"] == x["step"] - 1, y
print("PASS: every metric equal at each of", len(a), "steps; async/lag 0, policy version = step - 1")
PY
    echo "PASS: 1 generation rank + 2 training ranks at lag 0 end in the weights of a synchronous np 2 run, byte for byte"
    ;;

  versions)
    lag=$1; generators=$2
    run 3 "$work/run" --set distributed.generation_ranks="$generators" --set grpo.async_lag="$lag" \
      || { cat "$work/run.log"; fail "async run"; }
    /usr/bin/python3 - "$work/run" "$lag" "$generators" "${ASYNC_BREAK:-}" <<'PY' || fail "policy versions"  # h5py: Debian's python3-h5py
import glob, json, os, sys
import h5py
run, lag, generators, brk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
trainers = 3 - generators
def expected(g):
    return max(0, g - lag) + (1 if brk == "lag" else 0)  # one optimizer step per generation
seen = 0
for where, ranks in (("rollouts", trainers), ("rollouts/generated", generators)):
    for r in range(ranks):
        files = sorted(glob.glob(os.path.join(run, where, "rank-%05d" % r, "step-*.h5")))
        assert len(files) == 6, (where, r, files)
        for f in files:
            with h5py.File(f, "r") as h5:
                (name,) = list(h5.keys())
                g = int(name.split("_")[1])
                v = int(h5[name].attrs["policy_version"])
                assert v == expected(g), f"{f}: generation {g} sampled by policy version {v}, expected {expected(g)}"
                if where == "rollouts/generated":
                    assert "sampling_logps" in h5[name], f
                seen += 1
metrics = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
for m in metrics:
    g = m["step"] - 1  # step k trains generation k - 1
    assert m["async/policy_version"] == expected(g), m
    assert m["async/lag"] == g - expected(g), m
    for k in ("sampling/importance_sampling_ratio/mean", "sampling/sampling_logp_difference/max", "async/trainer_idle",
              "async/generator_idle", "async/generator_busy"):
        assert k in m, (k, sorted(m))
print(f"PASS: {seen} stored generations and {len(metrics)} steps: generation g sampled by policy version max(0, g - {lag})")
PY
    echo "PASS: lag $lag with $generators generation rank(s): every stored generation records the policy version the schedule fixes"
    ;;

  resume)
    lag=$1
    ASYNC=(--set distributed.generation_ranks=1 --set "grpo.async_lag=$lag" --set train.max_steps=8)
    run 3 "$work/straight" "${ASYNC[@]}" || { cat "$work/straight.log"; fail "uninterrupted run"; }
    # SIGUSR1 to every rank once step 3 is logged: all stop at the next meeting with a checkpoint, exit 3
    BASE+=("${ASYNC[@]}")
    FAULTS_ARGS=("${BASE[@]}")
    train_bg 3 "$work/signal" "$work/signal1.log"
    wait_for_step "$work/signal" 3 240 || { cat "$work/signal1.log"; fail "no step 3"; }
    kill -USR1 $(tagged_pids) 2>/dev/null
    wait "$job_pid"; rc=$?
    [ $rc -eq 3 ] || { cat "$work/signal1.log"; fail "SIGUSR1: the job exited $rc, expected 3 (checkpointed on signal)"; }
    grep -q "stop signal" "$work/signal1.log" || fail "no stop message"
    stopped=$(cat "$work/signal/checkpoints/latest")
    run 3 "$work/signal" --resume auto || { cat "$work/signal.log"; fail "resume after SIGUSR1"; }
    grep -q "resumed from" "$work/signal.log" || fail "the run after SIGUSR1 did not resume"
    same_weights "$work/straight" "$work/signal" "SIGUSR1 at lag $lag"
    echo "PASS: lag $lag: stopped by SIGUSR1 at $stopped, resumed, final weights identical"
    # SIGKILL to the whole job (mpirun and every rank) after step 4, then --resume auto
    train_bg 3 "$work/kill" "$work/kill1.log"
    wait_for_step "$work/kill" 4 240 || { cat "$work/kill1.log"; fail "no step 4"; }
    kill_job
    no_leftovers 5 || fail "processes left after the kill"
    killed=$(cat "$work/kill/checkpoints/latest")
    run 3 "$work/kill" --resume auto || { cat "$work/kill.log"; fail "resume after SIGKILL"; }
    grep -q "resumed from" "$work/kill.log" || fail "the run after SIGKILL did not resume"
    same_weights "$work/straight" "$work/kill" "SIGKILL at lag $lag"
    python3 - "$work/kill/metrics.jsonl" <<'PY' || fail "metrics.jsonl"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if l.strip()]
assert steps == list(range(1, 9)), steps
PY
    echo "PASS: lag $lag: killed (SIGKILL, whole job) with $killed as the latest checkpoint, resumed, final weights identical"
    ;;

  bad-settings)
    expect_exit2() {  # expect_exit2 NP PATTERN ARGS...
      local np=$1 pattern=$2; shift 2
      mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${BASE[@]}" --output "$work/bad" "$@" > "$work/bad.log" 2>&1
      local rc=$?
      [ $rc -eq 2 ] || { cat "$work/bad.log"; fail "$*: exit $rc, expected 2"; }
      [ "$(grep -c 'rayless: error:' "$work/bad.log")" -eq 1 ] || { cat "$work/bad.log"; fail "$*: not exactly one error line"; }
      grep -q "$pattern" "$work/bad.log" || { cat "$work/bad.log"; fail "$*: the message does not say '$pattern'"; }
      [ ! -e "$work/bad/checkpoints" ] || fail "$*: a checkpoint was written"
      echo "ok: $* -> $(grep 'rayless: error:' "$work/bad.log")"
    }
    expect_exit2 2 "leaves no rank to train" --set distributed.generation_ranks=2
    expect_exit2 2 "leaves no rank to train" --set distributed.generation_ranks=3
    expect_exit2 2 "grpo.async_lag" --set grpo.async_lag=-1 --set distributed.generation_ranks=1
    expect_exit2 2 "needs distributed.generation_ranks > 0" --set grpo.async_lag=1
    expect_exit2 2 "needs distributed.generation_ranks > 0" --set grpo.weight_sync_steps=2
    expect_exit2 2 "cannot be used with distributed.generation_ranks" --set distributed.generation_ranks=1 \
      --set train.replay_rollouts=tests/data/trl-steps/loss_dapo/rollouts.jsonl
    expect_exit2 3 "generation ranks share one training rank" --set distributed.generation_ranks=2 \
      --set train.per_device_train_batch_size=1 --set grpo.num_generations=1 --set grpo.scale_rewards=none
    echo "PASS: bad async settings: one line, exit 2, nothing written"
    ;;

  stalled-generator)
    timeout=10; slack=10
    ASYNC=(--set distributed.generation_ranks=1 --set grpo.async_lag=1 --set train.max_steps=8)
    run 3 "$work/straight" "${ASYNC[@]}" || { cat "$work/straight.log"; fail "uninterrupted run"; }
    BASE+=("${ASYNC[@]}")
    FAULTS_ARGS=("${BASE[@]}")
    train_bg 3 "$work/run" "$work/run1.log" --set "distributed.collective_timeout_s=$timeout"
    wait_for_step "$work/run" 2 240 || { cat "$work/run1.log"; fail "no step 2"; }
    victim=2
    hb=$work/run/logs/heartbeat/$(printf 'rank-%05d' "$victim")
    for _ in $(seq 100); do [ -s "$hb" ] && break; sleep 0.1; done
    pid=$(tagged_pids "$victim"); pid=${pid% }
    [ -n "$pid" ] || fail "no process for generation rank $victim"
    t0=$(now)
    kill -STOP "$pid"
    echo "SIGSTOP to generation rank $victim (pid $pid); collective_timeout_s = $timeout"
    wait_for_job_end "$t0" $((timeout + slack)) || { kill_job; tail -20 "$work/run1.log"; fail "the job did not end within $((timeout + slack)) s"; }
    wait "$job_pid"; rc=$?
    [ $rc -ne 0 ] || fail "mpirun exited 0"
    no_leftovers 5 || fail "processes left after the job ended"
    line=$(grep -m1 -E "rayless: error: collective [a-zA-Z_ ()-]+ stalled on rank [01] " "$work/run1.log") ||
      { cat "$work/run1.log"; fail "no stall message from a training rank"; }
    echo "$line" | grep -qE "not arrived: (.*, )?rank $victim \(" || fail "the message does not name generation rank $victim: $line"
    # it may name training rank 0 too: with the generator stopped during a weight push, rank 0 waits in
    # that broadcast (its own collective with rank 2), so it has not arrived at rank 1's collective either
    echo "job ended ${ended} s after the SIGSTOP, exit $rc: $line"
    run 3 "$work/run" --resume auto || { cat "$work/run.log"; fail "resume after the stall"; }
    same_weights "$work/straight" "$work/run" "resume after a stalled generation rank"
    echo "PASS: a stalled generation rank ends the job in ${ended} s naming rank $victim; --resume auto ends in the uninterrupted run's weights"
    ;;
  *) fail "unknown scenario $scenario" ;;
esac
