#!/usr/bin/env bash
# Offline validation of Kubernetes manifests (no API server): the upstream OpenAPI schema as compiled into npm
# kubernetes-models, plus API-server rules for batch/v1 Job, plus the Kubeflow PyTorchJob CRD's structure
# (its pod templates are checked as core/v1 pod templates). --strict also rejects unknown fields.
# Usage: k8s_validate.sh [--strict] FILE...    exit 0: all documents valid; 1: some invalid (reasons on stdout);
# 2: the validator could not be installed (npm).
# Adapted from the project's infra recipe (../shared/infra/k8s_validate.sh); the project owns this copy.
# First run installs the npm packages into $TAEHV_K8S_VALIDATOR_DIR (default /tmp/taehv-k8s-validator-tests),
# about 15 s; later runs reuse them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${TAEHV_K8S_VALIDATOR_DIR:-/tmp/taehv-k8s-validator-tests}
mkdir -p "$DIR"
cp "$HERE/k8s_validate.mjs" "$HERE/package.json" "$DIR/"
if [ ! -f "$DIR/node_modules/.taehv-complete" ]; then
  # Several tests may start at once: one installs, the others wait on the lock.
  exec 9>"$DIR/.install.lock"
  flock 9
  if [ ! -f "$DIR/node_modules/.taehv-complete" ]; then
    if ! (cd "$DIR" && npm install --no-audit --no-fund --loglevel=error \
          kubernetes-models@5.1.0 js-yaml@4.3.2 typescript@5.9.3 >&2); then
      echo "k8s_validate: npm install of kubernetes-models/js-yaml/typescript failed (needs nodejs, npm and the npm registry)" >&2
      exit 2
    fi
    touch "$DIR/node_modules/.taehv-complete"
  fi
  flock -u 9
fi
args=()
for a in "$@"; do
  case $a in
    --strict) args+=("$a") ;;
    *) [ -f "$a" ] || { echo "k8s_validate: no such file: $a" >&2; exit 1; }
       args+=("$(cd "$(dirname "$a")" && pwd)/$(basename "$a")") ;;
  esac
done
exec node "$DIR/k8s_validate.mjs" "${args[@]}"
