#!/usr/bin/env bash
# Stand-in for `rayless train` in the requeue tests: same command line, same exit codes, same
# checkpoint layout, no model. Each "step" sleeps; SIGUSR1 (or SIGTERM) makes it checkpoint at the
# next step boundary and exit 3; `--resume auto` continues from the newest checkpoint. The final
# OUTPUT/checkpoints/step-NNNNNNNN/model.safetensors lists the steps taken and the restarts do not
# change it, so a resumed run ends byte-identical to an uninterrupted one.
#
#   fake_train.sh train --config FILE [--set train.max_steps=N ...] [--output DIR] [--resume auto]
# Environment: FAKE_STEP_SECONDS (default 1). Every rank (SLURM_PROCID / OMPI_COMM_WORLD_RANK) logs
# to OUTPUT/fake-rank-R.log ("TIME HOST rank R: ..."); rank 0 writes the checkpoints.
set -uo pipefail
[ "${1:-}" = train ] || { echo "fake_train: usage: fake_train.sh train --config FILE ..." >&2; exit 2; }
shift
all_args="$*"
config="" output="runs/fake" resume="" max_steps=4
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    --resume) resume=$2; shift 2 ;;
    --set)
      case $2 in train.max_steps=*) max_steps=${2#*=} ;; esac
      shift 2
      ;;
    --help) echo "fake_train.sh train --config FILE [--set k=v] [--output DIR] [--resume auto]"; exit 0 ;;
    *) echo "rayless: error: train: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$config" ] || { echo "rayless: error: train: missing --config" >&2; exit 2; }
rank=${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-0}}
mkdir -p "$output/checkpoints"
[ "$rank" != 0 ] || printf '%s\n' "$all_args" >"$output/fake-args.txt"
log=$output/fake-rank-$rank.log
host=$(hostname)
say() { printf '%s %s rank %s: %s\n' "$(date +%T)" "$host" "$rank" "$*" | tee -a "$log"; }

stop_requested=0
trap 'stop_requested=1; say "signal received: checkpoint at the next step boundary"' USR1 TERM
# as rayless train: once every rank takes signals, rank 0 creates $RAYLESS_READY_FILE (the launchers
# hold signals until then); here each rank leaves a mark and rank 0 counts them
if [ -n "${RAYLESS_READY_FILE:-}" ]; then
  mkdir -p "$(dirname "$RAYLESS_READY_FILE")"
  touch "$RAYLESS_READY_FILE.rank-$rank"
  if [ "$rank" = 0 ]; then
    size=${SLURM_NTASKS:-${OMPI_COMM_WORLD_SIZE:-1}}
    until [ "$(ls "$RAYLESS_READY_FILE".rank-* 2>/dev/null | wc -l)" -ge "$size" ]; do sleep 0.1 & wait $!; done
    touch "$RAYLESS_READY_FILE"
    rm -f "$RAYLESS_READY_FILE".rank-*
  fi
fi

step=0
if [ "$resume" = auto ] && [ -f "$output/checkpoints/latest" ]; then
  step=$(cat "$output/checkpoints/latest")
  say "resumed from step $step"
fi

# Writes OUTPUT/checkpoints/step-NNNNNNNN/model.safetensors (rank 0 only, atomically) and latest.
checkpoint() {
  [ "$rank" = 0 ] || return 0
  local d
  d=$(printf '%s/checkpoints/step-%08d' "$output" "$step")
  mkdir -p "$d"
  seq 1 "$step" | sed 's/^/trained step /' >"$d/model.safetensors.tmp"
  mv "$d/model.safetensors.tmp" "$d/model.safetensors"
  echo "$step" >"$output/checkpoints/latest.tmp"
  mv "$output/checkpoints/latest.tmp" "$output/checkpoints/latest"
}

while [ "$step" -lt "$max_steps" ]; do
  # sleep in the background so the trap runs at once rather than after the sleep
  sleep "${FAKE_STEP_SECONDS:-1}" &
  wait $! || wait $!
  step=$((step + 1))
  say "step $step of $max_steps"
  # a made-up reward curve, so tools/plot_reward.sh has something to draw
  [ "$rank" != 0 ] || printf '{"step": %d, "reward": %s}\n' "$step" "$(awk -v s="$step" 'BEGIN { printf "%.4f", -8 / (1 + s / 3) }')" >>"$output/metrics.jsonl"
  if [ "$stop_requested" = 1 ] && [ "$step" -lt "$max_steps" ]; then
    checkpoint
    say "checkpointed at step $step: exit 3"
    exit 3
  fi
done
checkpoint
say "finished $max_steps steps"
exit 0
