#!/usr/bin/env bash
# End-to-end lag of a changelog pipeline: sustained writes into a changelog-enabled doris-lite
# table, `sluice run` following it (`scan.mode = "latest"`, `changelog.poll_interval = "1s"`,
# `checkpoint_interval = "1s"`) into a UNIQUE KEY target with the 2PC Doris sink; lag = the time a
# source load's rows are visible in the target - the time that load's commit returned.
#
#   host/benches/changelog_lag.sh [SECONDS] [ROWS_PER_LOAD] [LOADS_PER_SECOND]   # default 60, 2000, 10
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/changelog_lag.sh                  # skip the build
#
# The defaults write 20,000 rows/s: one Stream Load (curl) of 2,000 rows every 100 ms, each row with
# its id, its load's number and the wall-clock time the load was sent. changelog_lag.py polls the
# target every 100 ms for the loads present in full (a load counts as visible when the first query
# that saw it in full returned its result) and prints the lag's p50, p99 and max, against
# the target p99 <= poll interval + checkpoint interval + 1 s = 3 s. Release builds.
# Needs: cargo, curl, mysql (or mariadb) CLI, awk, python3 (pymysql is installed into a virtualenv,
# $SLUICE_BENCH_VENV or /var/tmp/sluice-bench-venv, when missing).
set -euo pipefail

SECONDS_="${1:-60}"
PER_LOAD="${2:-2000}"
PER_SEC="${3:-10}"
POLL=1
CKPT=1
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/common.sh"
bench_binaries
bench_venv "import pymysql" pymysql
start_doris_lite

COLS="id BIGINT, b INT, sent_ms BIGINT, name VARCHAR(32)"
sql "CREATE DATABASE bench"
sql "CREATE TABLE bench.src ($COLS) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 4 PROPERTIES (
       \"enable_unique_key_merge_on_write\" = \"true\", \"changelog.enable\" = \"true\",
       \"changelog.need_historical_value\" = \"true\")"
sql "CREATE TABLE bench.dst ($COLS) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 4 PROPERTIES (
       \"enable_unique_key_merge_on_write\" = \"true\")"

cat >"$WORK/pipeline.toml" <<TOML
[pipeline]
name = "changelog_lag"
parallelism = 1
checkpoint_interval = "${CKPT}s"
state_dir = "$WORK/state"

[doris]
fenodes = ["$FE"]

[[source]]
type = "doris"
table = "bench.src"
scan.mode = "latest"
changelog.poll_interval = "${POLL}s"

[[sink]]
type = "doris"
table = "bench.dst"
enable_2pc = true
TOML

SLUICE_LOG=info "$SLUICE" run "$WORK/pipeline.toml" 2>"$WORK/sluice.err" &
SLUICE_PID=$!
track "$SLUICE_PID"

printf 'writes: %d s, %d rows every %s ms (%d rows/s); pipeline: scan.mode = "latest", poll %d s, checkpoint %d s, 2PC into a UNIQUE KEY table; %s cores\n' \
  "$SECONDS_" "$PER_LOAD" "$(awk "BEGIN { print 1000 / $PER_SEC }")" "$(awk "BEGIN { print $PER_LOAD * $PER_SEC }")" "$POLL" "$CKPT" "$(nproc)"
if ! TMPDIR="$WORK" "$PY" "$HERE/changelog_lag.py" "$FE" "$QPORT" "$SECONDS_" "$PER_LOAD" "$PER_SEC" >"$WORK/lag.out"; then
  cat "$WORK/lag.out"
  echo "--- sluice log (tail) ---" >&2; tail -20 "$WORK/sluice.err" >&2
  exit 1
fi
grep -v '^P99 ' "$WORK/lag.out"
kill -TERM "$SLUICE_PID"
wait "$SLUICE_PID" || { echo "sluice exited with $?:" >&2; tail -20 "$WORK/sluice.err" >&2; }
grep -E '^(stopped|finished) at checkpoint' "$WORK/sluice.err" || true
P99=$(awk '/^P99 /{print $2}' "$WORK/lag.out")
TARGET=$(( POLL + CKPT + 1 ))
printf 'p99 %.2f s against the target <= %d s (poll %d s + checkpoint %d s + 1 s): %s\n' "$P99" "$TARGET" "$POLL" "$CKPT" \
  "$(awk "BEGIN { print ($P99 <= $TARGET) ? \"met\" : \"not met\" }")"
printf 'load average (1, 5, 15 min) at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
