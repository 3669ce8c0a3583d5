#!/usr/bin/env bash
# A rank that dies of a fatal signal says where (docs/reliability.md, finding 8): rank 1 of
# np 2 calls through a null function pointer (the io_faults shim, mode nullcall, at its first
# heartbeat write). The job must end non-zero with no process left, and the log must hold one report
# from rank 1: the signal, address 0, the caller (io_faults_call_through_null, found from the return
# address: Open MPI's own handler printed only the signal frame for such a crash) and a backtrace
# that goes on from there. The report replaces Open MPI's, so "Process received signal" is absent.
# usage: crash_report.sh RAYLESS IO_FAULTS_SHIM [BOUND_S]
rayless=$1; shim=$2; bound=${3:-120}
source "$(dirname "$0")/lib.sh"
make_work crash-report
out=$work/run
log=$work/run.log

t0=$(now)
RAYLESS_FAULT_MODE=nullcall RAYLESS_FAULT_RANK=1 RAYLESS_FAULT_PATH_SUBSTR=heartbeat/rank-00001 \
  RAYLESS_FAULT_LOG=$work/faults.log \
  setsid mpirun -np 2 --oversubscribe --bind-to none -x LD_PRELOAD="$shim" -x RAYLESS_FAULT_MODE -x RAYLESS_FAULT_RANK \
  -x RAYLESS_FAULT_PATH_SUBSTR -x RAYLESS_FAULT_LOG "$rayless" train "${FAULTS_ARGS[@]}" --output "$out" \
  --set train.max_steps=200 > "$log" 2>&1 &
job_pid=$!
wait_for_job_end "$t0" "$bound"
if [ -z "$ended" ]; then
  kill_job
  tail -30 "$log"
  fail "the job did not end within $bound s"
fi
wait "$job_pid"; rc=$?
grep -v '^\[' "$log" | sed "s|$work/||" | tail -40
echo "job ended after ${ended} s, mpirun exit $rc"
[ -s "$work/faults.log" ] || fail "the shim never fired (no $work/faults.log)"
cat "$work/faults.log"
[ $rc -ne 0 ] || fail "mpirun exited 0"
no_leftovers 5 || fail "processes left after the job ended"

n=$(grep -c '^rayless: rank 1 (host .*) died of SIGSEGV (address not mapped) at address 0x0, instruction 0x0$' "$log")
[ "$n" = 1 ] || fail "expected one crash report from rank 1, found $n"
grep -q '^rayless: rank 0 (host .*) died of' "$log" && fail "rank 0 reported a crash it did not have"
grep -A1 -x 'rayless: the instruction address is 0: a call through a null function pointer, made from:' "$log" \
  | tail -1 | grep -q 'libio_faults.so(io_faults_call_through_null+0x' \
  || fail "the report does not name the caller io_faults_call_through_null"
sed -n '/^rayless: backtrace/,$p' "$log" | grep -q 'libio_faults.so(io_faults_call_through_null+0x' \
  || fail "the backtrace does not go on from the caller"
grep -q 'Process received signal' "$log" && fail "Open MPI's handler printed a second report"
echo "PASS: one crash report from rank 1 naming the caller of the null function pointer; job ended non-zero, nothing left"
