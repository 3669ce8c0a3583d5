#!/usr/bin/env bash
# Starts a private Slurm cluster of several nodes on this one machine: each node is its own network
# namespace (its own network stack, a veth into one bridge, an address from 192.0.2.0/24, the
# documentation range that is never routed) and its own UTS namespace (host name nodeN), running
# its own slurmd; slurmctld runs in a namespace of its own ("ctl", 192.0.2.2), where the client
# commands run too (traffic into the root namespace over the bridge is not answered on every host, and
# nothing here needs it). munged runs once; its socket is a file, which every namespace sees.
#
#   tools/slurm/start_multinode.sh && source /tmp/rayless-slurm-mn/env && rl_exec sinfo
#
# Environment: RAYLESS_SLURM_MN_DIR (default /tmp/rayless-slurm-mn), RAYLESS_SLURM_NODES (2),
# RAYLESS_SLURM_NODE_CPUS (2). Needs root. tools/slurm/stop_multinode.sh takes it all down.
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
dir=${RAYLESS_SLURM_MN_DIR:-/tmp/rayless-slurm-mn}
nodes=${RAYLESS_SLURM_NODES:-2}
cpus=${RAYLESS_SLURM_NODE_CPUS:-2}
say() { printf 'slurm-multinode: %s\n' "$*"; }
die() { printf 'slurm-multinode: error: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, slurmd)"
command -v ip >/dev/null || die "ip (iproute2) not found"
command -v slurmd >/dev/null && command -v slurmctld >/dev/null || die "Slurm is not installed (tools/slurm/start.sh installs it)"

"$root_dir/tools/slurm/stop_multinode.sh" --quiet || true
rm -rf "$dir" && mkdir -p "$dir"/{state,spool,log,run,etc,munge} && chmod 755 "$dir"

# ---- the network: a bridge, one namespace per node and one for the controller ---------------------
bridge=rlmnbr0
ip link add "$bridge" type bridge
ip link set "$bridge" up
add_namespace() {  # NAME ADDRESS
  local ns=$1 address=$2 veth=rlmn-${1#rlmn-}
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$bridge" up
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}
add_namespace rlmn-ctl 192.0.2.2
for ((i = 1; i <= nodes; i++)); do add_namespace "rlmn-node$i" "192.0.2.$((10 + i))"; done

# ---- munge: one daemon, its socket a file every namespace reaches --------------------------------
slurm_start_munge "$dir" || die "munged did not come up"
munge_socket=$dir/munge/munge.socket.2

node_tmp=/var/tmp/rayless-slurm-node-tmp
mkdir -p "$node_tmp"

# ---- slurm.conf ------------------------------------------------------------------------------------
conf=$dir/etc/slurm.conf
{
  cat <<EOF2
# Written by tools/slurm/start_multinode.sh: a private cluster of $nodes nodes in network namespaces.
ClusterName=rayless-mn
SlurmctldHost=ctl(192.0.2.2)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# per node (a bind mount in each node's mount namespace): PMIx makes its per-step directories under
# TmpFS, and nodes sharing one /tmp would collide on them
TmpFS=$node_tmp
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdTimeout=30
EOF2
  slurm_conf_common
  for ((i = 1; i <= nodes; i++)); do
    echo "NodeName=node$i NodeAddr=192.0.2.$((10 + i)) CPUs=$cpus State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$conf"
chmod 644 "$conf"
cat >"$dir/env" <<EOF2
export SLURM_CONF=$conf
# client commands run in the controller's namespace: rl_exec sbatch ..., rl_exec squeue
rl_exec() { nsenter --net=/run/netns/rlmn-ctl "\$@"; }
EOF2

# ---- daemons: each in its namespace, with its own host name ---------------------------------------
export SLURM_CONF=$conf
in_namespace() {  # NAMESPACE HOSTNAME COMMAND...
  local ns=$1 host=$2; shift 2
  # nsenter enters only the network namespace; `ip netns exec` would also remount /sys, and slurmd
  # needs /sys/fs/cgroup as the machine has it
  setsid nsenter --net="/run/netns/$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@" </dev/null &
}
in_namespace rlmn-ctl ctl slurmctld -D -i -f "$conf" >"$dir/log/slurmctld.out" 2>&1
echo $! >"$dir/run/slurmctld.launcher.pid"
ctld_ready() { nsenter --net=/run/netns/rlmn-ctl scontrol ping 2>/dev/null | grep -q 'is UP'; }
for ((t = 0; t < 120; t++)); do ctld_ready && break; sleep 0.25; done
ctld_ready || { tail -20 "$dir/log/slurmctld.log" >&2; die "slurmctld did not answer"; }
for ((i = 1; i <= nodes; i++)); do
  mkdir -p "$dir/spool/node$i" "$dir/tmp/node$i"
  # its own mount namespace too, only to give it a private TmpFS; everything else stays shared
  setsid nsenter --net="/run/netns/rlmn-node$i" unshare --uts --mount sh -c \
    'hostname "$0" && mount --bind "$1" "$2" && shift 2 && exec "$@"' "node$i" "$dir/tmp/node$i" "$node_tmp" \
    slurmd -D -f "$conf" -N "node$i" </dev/null >"$dir/log/slurmd-node$i.out" 2>&1 &
  echo $! >"$dir/run/slurmd-node$i.launcher.pid"
done
all_idle() { [ "$(nsenter --net=/run/netns/rlmn-ctl sinfo -h -o '%T' -N 2>/dev/null | grep -c '^idle')" = "$nodes" ]; }
for ((t = 0; t < 240; t++)); do all_idle && break; sleep 0.25; done
all_idle || { nsenter --net=/run/netns/rlmn-ctl sinfo -N -l >&2; tail -20 "$dir"/log/slurmd-node1.log >&2; die "nodes did not become idle"; }
say "up: $nodes nodes (node1..node$nodes, 192.0.2.11..), controller ctl 192.0.2.2; source $dir/env, then rl_exec sinfo"
