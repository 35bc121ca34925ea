#!/usr/bin/env bash
# The host and doris-lite tests, run several times in a row while `stress-ng` keeps every core
# busy: a test that depends on timing fails here long before it flakes in CI.
#
#   bash tests/stress.sh [runs]      (default 5; run `bash tests/run.sh` once first, which builds
#                                     the plugins and tansu and installs the test clients and plugin tools)
#
# Prints each run's result and the tests that failed in it; exits 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
# The same builds and test tools as tests/run.sh (which installed them).
source tests/env.sh
if [ ! -e plugins/target ]; then
  echo "plugins/target is missing: run \`bash tests/run.sh\` once first" >&2
  exit 2
fi
command -v stress-ng >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng; }

cargo test --workspace --no-run
logs=$(mktemp -d /tmp/sluice-stress.XXXXXX)
stress-ng --cpu "$(nproc)" --quiet &
load=$!
trap 'kill $load 2>/dev/null || true' EXIT

failed=0
for run in $(seq 1 "$runs"); do
  start=$(date +%s)
  if cargo test --workspace >"$logs/run-$run.log" 2>&1; then
    result=passed
  else
    result=FAILED
    failed=$((failed + 1))
  fi
  summary=$(grep -E '^test result:' "$logs/run-$run.log" | awk '{p += $4; f += $6} END {print p " passed, " f " failed"}')
  echo "run $run/$runs under stress-ng --cpu $(nproc): $result ($summary) in $(($(date +%s) - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -E '^test .* FAILED$|^    [a-z_:]+$' "$logs/run-$run.log" | sort -u || true
done
echo "$failed of $runs runs failed; logs in $logs"
[ "$failed" -eq 0 ]
