#!/usr/bin/env bash
# torchelastic's file timer through the real taehv-run (TORCHELASTIC_ENABLE_FILE_TIMER=1), 2 Python DDP workers over
# Gloo using torch.distributed.elastic.timer unchanged:
#  1. garbage on the timer's pipe: one warning line, the job finishes;
#  2. rank 1 overruns its timer.expires(after=2): killed by SIGKILL, named, the job fails fast (as under torchrun).
# Usage: file_timer_test.sh TAEHV_RUN PYTHON
source "$(dirname "$0")/example_test_lib.sh" "$@"
export TORCHELASTIC_ENABLE_FILE_TIMER=1 OMP_NUM_THREADS=1

"$run" --standalone --nproc-per-node 2 -- "$python" "$here/file_timer_worker.py" -1 1 >"$out/log" 2>&1 ||
  fail "garbage on the timer's pipe disturbed the job"
[ "$(grep -c 'not a torchelastic timer request' "$out/log")" = 1 ] || fail "want one garbage line"
[ "$(grep -c 'finished, sum 64' "$out/log")" = 2 ] || fail "both ranks finish 6 all-reduces"

start=$(date +%s.%N)
status=0
"$run" --standalone --nproc-per-node 2 --shutdown-grace 2 -- "$python" "$here/file_timer_worker.py" 3 0 >"$out/log" 2>&1 ||
  status=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
[ "$status" = 137 ] || fail "want exit 137 (the worker's SIGKILL), got $status"
grep -qE "torchelastic timer 'step' of rank 1 \(pid [0-9]+\) expired [0-9]+ ms ago; sending SIGKILL" "$out/log" ||
  fail "the timer's line names rank 1"
grep -q 'first failure: rank 1' "$out/log" || fail "the summary names rank 1"
grep -q "timer 'step' of rank 0" "$out/log" && fail "rank 0's timer (30 s) did not expire"
grep -q 'finished' "$out/log" && fail "nobody finishes"
echo "overrun rank killed by its torchelastic timer, job failed fast; whole run $took s (torch import, 3 steps, 2 s timer)"
[ "$(echo "$took < 60" | bc)" = 1 ] || fail "took $took s: not fail fast"
