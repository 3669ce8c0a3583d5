#!/usr/bin/env bash
# ctest "multinode: ..." on the two-node cluster of tools/slurm/start_multinode.sh (each node its own
# network namespace and host name). Runs in the root namespace; Slurm commands go through rl_exec
# (the controller's namespace).
#   test_multinode.sh train RAYLESS WORK     multinode.sbatch, 2 nodes x 2 tasks: ranks on node1 and
#                                            node2, traffic over both nodes' veths, final weights equal
#                                            a 4-rank single-node run's
#   test_multinode.sh preempt RAYLESS WORK   test_preempt.sh across the two nodes
#   test_multinode.sh sweep RAYLESS WORK     test_sweep.sh (array tasks) on the cluster
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
what=${1:?usage: test_multinode.sh train|preempt|sweep RAYLESS WORK}
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

case $what in
  train)
    bytes() { cat /sys/class/net/rlmn-node$1/statistics/rx_bytes; }
    before1=$(bytes 1); before2=$(bytes 2)
    steps=4
    job=$(cd "$root_dir" && RAYLESS_BIN=$bin RAYLESS_CONFIG=$root_dir/configs/ci-small.toml RAYLESS_OUTPUT=$work/run \
            rl_exec sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 --time=10 --output="$work/train-%j.out" \
            slurm/multinode.sbatch --set "train.max_steps=$steps") || fail "sbatch failed"
    job=${job%%;*}
    for ((i = 0; i < 400; i++)); do
      state=$(rl_exec scontrol -o show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
      case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
      sleep 1
    done
    cat "$work/train-$job.out"
    [ "$state" = COMPLETED ] || fail "job $job ended $state"
    grep -q "4 rank(s) x 1 thread(s) on 2 nodes (node1: ranks 0-1, node2: ranks 2-3)" "$work/train-$job.out" \
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
  preempt)
    (cd "$root_dir" && in_cluster env RAYLESS_TEST_SBATCH_ARGS="--nodes=2 --ntasks-per-node=2 --ntasks=4" \
       tools/slurm/test_preempt.sh "$bin" "$work")
    ;;
  sweep)
    (cd "$root_dir" && in_cluster tools/slurm/test_sweep.sh "$work")
    ;;
  *) fail "unknown test $what" ;;
esac
