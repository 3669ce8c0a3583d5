#!/usr/bin/env bash
# ctest "multinode: ..." on the two-node cluster of tools/slurm/start_multinode.sh (each node its own
# network namespace and host name). Runs in the root namespace; Slurm commands go through rl_exec
# (the controller's namespace).
#   test_multinode.sh train RAYLESS WORK     multinode.sbatch, 2 nodes x 2 tasks: ranks on node1 and
#                                            node2, traffic over both nodes' veths, final weights equal
#                                            a 4-rank single-node run's
#   test_multinode.sh preempt RAYLESS WORK   test_preempt.sh across the two nodes
#   test_multinode.sh timelimit RAYLESS WORK test_timelimit.sh --fake across the two nodes: --time=2
#                                            --signal=B:USR1@60, no outside signal; Slurm's warning
#                                            reaches every rank on both nodes, requeue, COMPLETED
#   test_multinode.sh sweep RAYLESS WORK     test_sweep.sh (array tasks) on the cluster
#   test_multinode.sh async RAYLESS WORK     asynchronous GRPO across the nodes: multinode.sbatch, 2 nodes x 2
#                                            tasks, 2 generation ranks (ranks 2-3: node2) and 2 training
#                                            ranks (node1), lag 1: rollouts and weights cross the veths,
#                                            the final weights equal a single-node run's of the same roles
#   test_multinode.sh nodelost RAYLESS WORK  node2 killed mid-run (its slurmd and ranks): the job ends
#                                            within the watchdog bound naming node2's ranks, nothing is
#                                            left running; after a cluster restart, --resume auto ends
#                                            in the weights of an uninterrupted 4-rank run
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
what=${1:?usage: test_multinode.sh train|preempt|timelimit|sweep|async|nodelost RAYLESS WORK}
bin=${2:?}; work=${3:?}
dir=${RAYLESS_SLURM_MN_DIR:-/tmp/rayless-slurm-mn}
if [ "${RAYLESS_SLURM_MULTINODE_UP:-0}" != 1 ] || [ ! -f "$dir/env" ]; then
  echo "SKIP: the two-node cluster is not up (tools/test.sh starts it with tools/slurm/start_multinode.sh)"
  exit 77
fi
source "$dir/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
in_cluster() { nsenter --net=/run/netns/rlmn-ctl env RAYLESS_SLURM_DIR="$dir" RAYLESS_SLURM_UP=1 "$@"; }
# bytes N: what node N has sent so far (the host side of its veth receives it)
bytes() { cat /sys/class/net/rlmn-node$1/statistics/rx_bytes; }

# multinode_job NAME ARGS...: slurm/multinode.sbatch on 2 nodes x 2 tasks with the tiny config and
# ARGS, output to $work/run; waits for it and prints its log. Sets job, log (its file), and before1 and
# before2 (bytes 1 and 2 at its submission). Once, a job whose ranks died inside MPI_Init is submitted
# again, saying so: Open MPI's own start-up on these namespaced nodes (seen once in CI: "A system call
# failed during shared memory initialization", then a crash in mca_btl_tcp under ompi_mpi_init, before
# any rayless code ran). Any other end than COMPLETED fails.
multinode_job() {
  local name=$1 attempt i state; shift
  for attempt in 1 2; do
    rm -rf "$work/run"
    before1=$(bytes 1); before2=$(bytes 2)
    job=$(cd "$root_dir" && RAYLESS_BIN=$bin RAYLESS_CONFIG=$root_dir/configs/ci-small.toml RAYLESS_OUTPUT=$work/run \
            rl_exec sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 --time=10 --output="$work/$name-%j.out" \
            slurm/multinode.sbatch "$@") || fail "sbatch failed"
    job=${job%%;*}
    for ((i = 0; i < 400; i++)); do
      state=$(rl_exec scontrol -o show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
      case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
      sleep 1
    done
    log=$work/$name-$job.out
    cat "$log"
    [ "$state" = COMPLETED ] && return 0
    if [ $attempt = 1 ] && grep -q 'ompi_mpi_init' "$log"; then
      echo "RETRY: job $job's ranks died inside MPI_Init (Open MPI's start-up, before rayless ran): once more"
      continue
    fi
    fail "job $job ended $state"
  done
}

case $what in
  train)
    steps=4
    multinode_job train --set "train.max_steps=$steps"
    grep -q "4 rank(s) x 1 thread(s) on 2 nodes (node1: ranks 0-1, node2: ranks 2-3)" "$log" \
      || fail "the ranks did not report two host names"
    got1=$(( $(bytes 1) - before1 )); got2=$(( $(bytes 2) - before2 ))
    echo "bytes into node1's veth: $got1, node2's: $got2"
    [ $got1 -gt 1000000 ] && [ $got2 -gt 1000000 ] || fail "less than 1 MB crossed a node's veth: MPI did not talk between nodes"
    # the same run on one node, 4 ranks, through mpirun
    (cd "$root_dir" && mpirun -np 4 --oversubscribe --bind-to none "$bin" train --config "$root_dir/configs/ci-small.toml" --output "$work/single" \
      --set "train.max_steps=$steps") > "$work/single.log" 2>&1 || { cat "$work/single.log"; fail "single-node run"; }
    final=$(printf 'checkpoints/step-%08d/model.safetensors' $steps)
    cmp "$work/run/$final" "$work/single/$final" || fail "2 nodes x 2 ranks and 1 node x 4 ranks ended in different weights"
    echo "PASS: 2 nodes x 2 tasks: ranks on node1 and node2, $((got1 / 1024)) KiB and $((got2 / 1024)) KiB over the veths, final weights equal the 4-rank single-node run's"
    ;;
  async)
    steps=4
    roles=(--set distributed.generation_ranks=2 --set grpo.async_lag=1 --set grpo.num_iterations=1
           --set grpo.steps_per_generation=1 --set "train.max_steps=$steps")
    multinode_job async "${roles[@]}"
    grep -q "asynchronous GRPO: ranks 0-1 train, ranks 2-3 generate" "$log" || fail "no roles line"
    grep -q "4 rank(s) x 1 thread(s) on 2 nodes (node1: ranks 0-1, node2: ranks 2-3)" "$log" \
      || fail "the training ranks are not all on node1 and the generation ranks on node2"
    # the host side of a node's veth receives what that node sends: node1 (training) sends the weights
    # (12 MB a push of the tiny model's float32 parameters), node2 (generation) the rollouts and its
    # acknowledgements, small here (5 generations of 8 rows of at most 12 tokens; 109 KB in the run
    # that set this bound). That the rollouts crossed shows in the weights: the training ranks sample none
    got1=$(( $(bytes 1) - before1 )); got2=$(( $(bytes 2) - before2 ))
    echo "bytes sent by node1 (weights): $got1, by node2 (rollouts): $got2"
    [ $got1 -gt 10000000 ] || fail "less than 10 MB of weights left node1 (the training ranks)"
    [ $got2 -gt 40000 ] || fail "less than 40 kB of rollouts left node2 (the generation ranks)"
    (cd "$root_dir" && mpirun -np 4 --oversubscribe --bind-to none "$bin" train --config "$root_dir/configs/ci-small.toml" \
      --output "$work/single" --set distributed.threads_per_rank=1 "${roles[@]}") > "$work/single.log" 2>&1 \
      || { cat "$work/single.log"; fail "single-node run"; }
    final=$(printf 'checkpoints/step-%08d/model.safetensors' $steps)
    cmp "$work/run/$final" "$work/single/$final" || fail "the two-node and the single-node asynchronous runs ended in different weights"
    echo "PASS: generation ranks on node2, training ranks on node1, lag 1: $((got1 / 1024)) KiB and $((got2 / 1024)) KiB over the veths, final weights equal a single-node run's"
    ;;
  preempt)
    (cd "$root_dir" && in_cluster env RAYLESS_TEST_SBATCH_ARGS="--nodes=2 --ntasks-per-node=2 --ntasks=4" \
       tools/slurm/test_preempt.sh "$bin" "$work")
    ;;
  timelimit)
    # the fake trainer: Slurm's warning, its path to every rank on both nodes, the requeue. The real
    # trainer's answer to the same signal (checkpoint, exit 3, exact resume across nodes) is
    # "multinode: preempt"'s; here it would spend ~250 s of both cores on two 100-s runs.
    (cd "$root_dir" && in_cluster env RAYLESS_TEST_SBATCH_ARGS="--nodes=2 --ntasks-per-node=2 --ntasks=4" \
       tools/slurm/test_timelimit.sh "$bin" "$work" --fake) || exit
    logs=("$work"/limited/fake-rank-*.log)
    [ ${#logs[@]} = 4 ] || fail "${#logs[@]} rank logs in $work/limited, expected 4"
    # "TIME HOST rank R: signal received ...": distinct ranks per host
    warned=$(grep -h 'signal received' "${logs[@]}" | awk '{print $2, $4}' | sort -u)
    echo "ranks warned (host rank): $(echo $warned)"
    for node in node1 node2; do
      [ "$(grep -c "^$node " <<<"$warned")" = 2 ] || fail "the 2 ranks on $node did not both receive Slurm's warning"
    done
    echo "PASS: Slurm's time-limit warning reached the 2 ranks on node1 and the 2 on node2"
    ;;
  sweep)
    (cd "$root_dir" && in_cluster tools/slurm/test_sweep.sh "$work")
    ;;
  nodelost)
    wait_end() {  # JOB SECONDS -> prints the final state
      local i state
      for ((i = 0; i < $2; i++)); do
        state=$(rl_exec scontrol -o show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
        sleep 1
      done
      echo "$state"
    }
    # constant learning rate: a resume with a smaller max_steps then follows the same trajectory
    common=(--set optim.lr_scheduler_type=constant --set checkpoint.save_steps=2 --set distributed.collective_timeout_s=10)
    submit() {
      (cd "$root_dir" && RAYLESS_BIN=$bin RAYLESS_CONFIG=$root_dir/configs/ci-small.toml RAYLESS_OUTPUT=$work/run \
         rl_exec sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 --time=10 --output="$work/job-%j.out" \
         slurm/multinode.sbatch "${common[@]}" "$@")
    }
    # a fresh cluster: this test takes a node down
    "$root_dir/tools/slurm/start_multinode.sh" > /dev/null || fail "cluster start"
    source "$dir/env"
    job=$(submit --set train.max_steps=400) || fail "sbatch failed"
    job=${job%%;*}
    for ((i = 0; i < 600; i++)); do
      [ "$(wc -l < "$work/run/metrics.jsonl" 2>/dev/null || echo 0)" -ge 3 ] && break
      sleep 0.5
    done
    [ "$(wc -l < "$work/run/metrics.jsonl" 2>/dev/null || echo 0)" -ge 3 ] || { cat "$work"/job-*.out; fail "no third step"; }
    [ -s "$work/run/checkpoints/latest" ] || fail "no checkpoint before the node was lost"
    t0=$(date +%s)
    kill -KILL $(ip netns pids rlmn-node2) 2>/dev/null
    # the ranks left on node1 end through the watchdog (10 s); Slurm then cleans up the step
    # (only this cluster's ranks: other tests may run rayless at the same time)
    ranks_left() { for p in $(ip netns pids rlmn-node1 2>/dev/null); do [ "$(cat /proc/$p/comm 2>/dev/null)" = rayless ] && echo $p; done; }
    for ((i = 0; i < 120; i++)); do [ -z "$(ranks_left)" ] && break; sleep 0.5; done
    took=$(( $(date +%s) - t0 ))
    state=$(wait_end "$job" 120)
    cat "$work/job-$job.out"
    echo "node2 killed: the ranks on node1 were gone after $took s; job $job ended $state after $(( $(date +%s) - t0 )) s"
    # bound: the watchdog (10 s) + the step teardown after MPI_Abort (KillWait = 10 s) + 10 s
    [ $took -le 30 ] || fail "the surviving ranks did not end within 10 s (watchdog) + 10 s (KillWait) + 10 s"
    [ "$state" != RUNNING ] || fail "the job still runs"
    grep -q "not arrived: .*rank [23] (node2: silent" "$work/job-$job.out" || fail "the stall message does not name node2's ranks"
    [ -z "$(ranks_left)" ] || fail "rayless processes left running on node1"
    latest=$(cat "$work/run/checkpoints/latest")
    # the node back (the whole cluster restarted), then resume
    "$root_dir/tools/slurm/start_multinode.sh" || fail "cluster restart"
    source "$dir/env"
    steps=$(( $(echo "$latest" | sed -E 's/^step-0*([0-9]+).*/\1/') + 2 ))
    job=$(submit --set "train.max_steps=$steps" --resume auto) || fail "sbatch --resume auto failed"
    job=${job%%;*}
    state=$(wait_end "$job" 300)
    cat "$work/job-$job.out"
    [ "$state" = COMPLETED ] || fail "the resumed job ended $state"
    grep -q "resumed from .*$latest" "$work/job-$job.out" || fail "did not resume from $latest"
    (cd "$root_dir" && mpirun -np 4 --oversubscribe --bind-to none "$bin" train --config "$root_dir/configs/ci-small.toml" \
       --output "$work/single" "${common[@]}" --set "train.max_steps=$steps") > "$work/single.log" 2>&1 \
      || { cat "$work/single.log"; fail "single-node run"; }
    final=$(printf 'checkpoints/step-%08d/model.safetensors' $steps)
    cmp "$work/run/$final" "$work/single/$final" || fail "the resumed run's weights differ from an uninterrupted run's"
    echo "PASS: node lost -> job ended in $took s naming node2's ranks; resumed from $latest to step $steps, weights equal an uninterrupted run's"
    ;;
  *) fail "unknown test $what" ;;
esac
