#!/usr/bin/env bash
# The progress channel from Python (examples/progress/taehv_progress.py) through the real taehv-run, 2 workers:
#  1. rank 0 sends garbage on its channel every step: one warning line (rate-limited), both ranks finish, exit 0;
#  2. rank 1 blocks for good at step 5: named with its section within the bound, py-spy's dump of it in its stack
#     file shows the blocking function, the job fails fast;
#  3. the same with --hang-timeout 0: nobody is judged (the job still runs 6 s later, when the test stops it).
# Usage: progress_test.sh TAEHV_RUN PYTHON
source "$(dirname "$0")/example_test_lib.sh" "$@"

"$run" --standalone --nproc-per-node 2 --hang-timeout 2 -- "$python" "$here/progress_worker.py" 40 -1 1 >"$out/log" 2>&1 ||
  fail "garbage on the channel disturbed the job (exit $?)"
[ "$(grep -c 'rank 0 sent garbage on its progress channel' "$out/log")" = 1 ] || fail "want one garbage line"
grep -q "not a progress report (want 'step=<N> section=<name>'): '?step=oops" "$out/log" || fail "the line quotes it"
[ "$(grep -c 'finished 40 steps' "$out/log")" = 2 ] || fail "both ranks finish"
grep -q 'hang:' "$out/log" && fail "no hang"

start=$(date +%s.%N)
status=0
"$run" --standalone --nproc-per-node 2 --hang-timeout 2 --shutdown-grace 1 --log-dir "$out/logs" -- \
  "$python" "$here/progress_worker.py" 40 5 0 >"$out/log" 2>&1 || status=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
[ "$status" -ne 0 ] || fail "a hang fails the job"
grep -qE 'taehv-run: hang: rank 1 hung in section data of step 5: no progress for [0-9.]+ s \(bound 2.0 s\); top frames: [^;]*wait_forever_in_data' "$out/log" ||
  fail "the summary names rank 1, its section and the blocking frame"
grep -q 'wait_forever_in_data' "$out/logs/hang_rank1.stacks.txt" || fail "rank 1's stacks (py-spy) show the frame"
grep -q '^# rank 0 pid' "$out/logs/hang_rank0.stacks.txt" || fail "rank 0's stack file"
echo "hung Python rank named and stopped; whole run $took s (about 1 s of steps, 2 s bound, capture, 1 s grace)"
[ "$(echo "$took < 20" | bc)" = 1 ] || fail "took $took s"

status=0
timeout 6 "$run" --standalone --nproc-per-node 2 --hang-timeout 0 -- \
  "$python" "$here/progress_worker.py" 40 5 0 >"$out/log" 2>&1 || status=$?
[ "$status" = 124 ] || fail "with --hang-timeout 0 the job runs until stopped (want timeout's 124, got $status)"
if grep -q 'hang:' "$out/log"; then fail "--hang-timeout 0: no hang detection"; fi
