#!/usr/bin/env bash
# Starts a private single-node Slurm (munged + slurmctld + slurmd) for tests and demos, without
# systemd, with all state under one directory so it never touches a system Slurm. Idempotent: when
# the cluster is already up it only says so. Clients then need SLURM_CONF, written to DIR/env:
#
#   tools/slurm/start.sh && source /tmp/rayless-slurm/env && sinfo
#
# Environment knobs:
#   RAYLESS_SLURM_DIR   state, logs, config (default /tmp/rayless-slurm)
#   RAYLESS_SLURM_PORT  slurmctld port; slurmd uses PORT+1 (default 17817; Slurm's own are 6817/6818)
# Needs root (the daemons run as root, munged as the munge user); installs Debian's Slurm if missing.
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/slurm/lib.sh
source "$root_dir/tools/slurm/lib.sh"

dir=$(slurm_dir)
ctld_port=${RAYLESS_SLURM_PORT:-17817}
slurmd_port=$((ctld_port + 1))

say() { printf 'slurm-start: %s\n' "$*"; }
die() { printf 'slurm-start: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (slurmd launches jobs; munged runs as the munge user)"

if [ -f "$dir/env" ] && slurm_cluster_idle "$dir"; then
  say "already up ($dir; source $dir/env)"
  exit 0
fi

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  command -v munged >/dev/null || missing+=(munge)
  # srun --mpi=pmix needs libpmix at run time: Open MPI ranks start only through PMIx
  dpkg-query -W -f='${Status}' libpmix-dev 2>/dev/null | grep -q 'install ok installed' || missing+=(libpmix-dev)
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || die "apt-get update failed"
  # the packages try to start services; without systemd that fails harmlessly (policy-rc.d)
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
}

# Waits up to $2 seconds for command $1 (a function name) to succeed.
wait_for() {
  local what=$1 seconds=$2 i
  for ((i = 0; i < seconds * 4; i++)); do
    "$what" && return 0
    sleep 0.25
  done
  return 1
}

install_packages

# A half-started earlier cluster (or a crashed one) is cleared first: a fresh start is simplest.
"$root_dir/tools/slurm/stop.sh" --quiet || true

mkdir -p "$dir"
chmod 755 "$dir"
rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/munge" "$dir/etc" "$dir/env"
mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/etc" "$dir/munge"

for port in "$ctld_port" "$slurmd_port"; do
  if ss -ltn 2>/dev/null | awk '{print $4}' | grep -q ":$port\$"; then
    die "port $port is taken (set RAYLESS_SLURM_PORT to another base port)"
  fi
done

# ---- munge: a private key and socket, run as the munge user (tools/slurm/lib.sh) -----------------
slurm_start_munge "$dir" || die "munged did not come up"
munge_socket=$dir/munge/munge.socket.2

# ---- slurm.conf ----------------------------------------------------------------------------------
node_line=$(slurmd -C 2>/dev/null | head -n 1)
[[ $node_line == NodeName=* ]] || die "slurmd -C printed no NodeName line"
node_name=${node_line#NodeName=}
node_name=${node_name%% *}
conf=$dir/etc/slurm.conf
cat >"$conf" <<EOF
# Written by tools/slurm/start.sh: a private single-node cluster for tests.
ClusterName=rayless
SlurmctldHost=$node_name(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$munge_socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
EOF
slurm_conf_common >>"$conf"
cat >>"$conf" <<EOF
SlurmdTimeout=60
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
chmod 644 "$conf"
printf 'export SLURM_CONF=%q\n' "$conf" >"$dir/env"

# ---- daemons ---------------------------------------------------------------------------------------
export SLURM_CONF=$conf
setsid slurmctld -D -i -f "$conf" >"$dir/log/slurmctld.out" 2>&1 </dev/null &
echo $! >"$dir/run/slurmctld.launcher.pid"
ctld_ready() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
wait_for ctld_ready 30 || { slurm_print_logs "$dir" >&2; die "slurmctld did not answer scontrol ping"; }

setsid slurmd -D -f "$conf" -N "$node_name" >"$dir/log/slurmd.out" 2>&1 </dev/null &
echo $! >"$dir/run/slurmd.launcher.pid"
idle() { slurm_cluster_idle "$dir"; }
if ! wait_for idle 60; then
  sinfo -N -l >&2 || true
  slurm_print_logs "$dir" >&2
  die "node $node_name did not become idle within 60 s"
fi
say "up: node $node_name idle, ports $ctld_port/$slurmd_port, state in $dir (source $dir/env)"
