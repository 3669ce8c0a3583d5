#!/usr/bin/env bash
# Takes down what tools/slurm/start_multinode.sh started: cancels the jobs, ends the daemons (every
# process left in the cluster's network namespaces, and munged), removes the namespaces and the
# bridge. Leaves the logs. --quiet: say nothing when nothing was running.
set -uo pipefail
dir=${RAYLESS_SLURM_MN_DIR:-/tmp/rayless-slurm-mn}
quiet=0
[ "${1:-}" = --quiet ] && quiet=1
say() { [ $quiet = 1 ] || printf 'slurm-multinode-stop: %s\n' "$*"; }
namespaces=$(ip netns list 2>/dev/null | awk '{print $1}' | grep '^rlmn-' || true)
if [ -n "$namespaces" ] && [ -f "$dir/etc/slurm.conf" ]; then
  SLURM_CONF=$dir/etc/slurm.conf timeout 10 nsenter --net=/run/netns/rlmn-ctl scancel --full --quiet --user=root 2>/dev/null || true
fi
for ns in $namespaces; do
  pids=$(ip netns pids "$ns" 2>/dev/null)
  [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
done
sleep 1
for ns in $namespaces; do
  pids=$(ip netns pids "$ns" 2>/dev/null)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns del "$ns" && say "removed namespace $ns"
done
# a namespace goes only when its last process has; its veth's root end can outlive the del a moment
for ((i = 0; i < 40; i++)); do
  veths=$(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^rlmn-' || true)
  [ -z "$veths" ] && break
  for v in $veths; do ip link del "$v" 2>/dev/null; done
  sleep 0.25
done
ip link show rlmnbr0 >/dev/null 2>&1 && ip link del rlmnbr0 && say "removed bridge rlmnbr0"
if [ -f "$dir/munge/munged.pid" ]; then
  pid=$(tr -dc '0-9' <"$dir/munge/munged.pid")
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && say "stopped munged ($pid)"
fi
exit 0
