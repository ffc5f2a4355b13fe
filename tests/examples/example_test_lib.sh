# Sourced by the examples' shell tests (progress_test.sh, file_timer_test.sh) with their arguments, TAEHV_RUN PYTHON:
# strict mode, here (this folder), run and python, out (a scratch folder removed at exit, the job's output in
# $out/log), and fail MESSAGE (says it, shows $out/log, exits 1).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 2 ] || { echo "usage: $(basename "$0") TAEHV_RUN PYTHON" >&2; exit 2; }
run=$1 python=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$out/log"; exit 1; }
