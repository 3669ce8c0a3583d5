#!/usr/bin/env bash
# Stops the private Slurm that tools/slurm/start.sh started: cancels its jobs, then ends slurmd,
# slurmctld and munged by the process ids recorded in RAYLESS_SLURM_DIR (default /tmp/rayless-slurm).
# Leaves the logs in place for a post-mortem. --quiet: say nothing when nothing was running.
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/slurm/lib.sh
source "$root_dir/tools/slurm/lib.sh"
dir=$(slurm_dir)
quiet=0
[ "${1:-}" = --quiet ] && quiet=1
say() { [ $quiet = 1 ] || printf 'slurm-stop: %s\n' "$*"; }

# Reads a pid from file $1 and prints it if that process still runs program $2.
live_pid() {
  local file=$1 name=$2 pid comm
  [ -f "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null)
  [[ $comm == "$name"* ]] || return 1
  printf '%s\n' "$pid"
}

# Sends TERM to a pid, waits up to 10 s, then KILL.
end_pid() {
  local pid=$1 what=$2 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 40; i++)); do
    kill -0 "$pid" 2>/dev/null || { say "stopped $what ($pid)"; return 0; }
    sleep 0.25
  done
  kill -KILL "$pid" 2>/dev/null && say "killed $what ($pid)"
}

# Jobs first, so their slurmstepd and tasks end through Slurm rather than being orphaned.
if [ -f "$dir/etc/slurm.conf" ] && live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null; then
  export SLURM_CONF=$dir/etc/slurm.conf
  if [ -n "$(timeout 10 squeue -h -o %i 2>/dev/null)" ]; then
    timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
      [ -z "$(timeout 10 squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
fi

stopped=0
for spec in "slurmd.pid:slurmd" "slurmd.launcher.pid:slurmd" \
            "slurmctld.pid:slurmctld" "slurmctld.launcher.pid:slurmctld"; do
  if pid=$(live_pid "$dir/run/${spec%%:*}" "${spec##*:}"); then
    end_pid "$pid" "${spec##*:}"
    stopped=1
  fi
done
if pid=$(live_pid "$dir/munge/munged.pid" munged); then
  end_pid "$pid" munged
  stopped=1
fi
# the runuser that started munged exits with it; end it if it lingers
if pid=$(live_pid "$dir/run/munged.launcher.pid" runuser); then
  end_pid "$pid" "runuser (munged)"
fi
rm -f "$dir/env"
[ $stopped = 1 ] || say "nothing was running in $dir"
exit 0
