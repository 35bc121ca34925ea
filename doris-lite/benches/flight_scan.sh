#!/usr/bin/env bash
# Arrow Flight SQL scan throughput of doris-lite (release build), with pyarrow as the client.
#
#   doris-lite/benches/flight_scan.sh [ROWS]       # default 5,000,000 rows, 5 columns, 8 tablets
#   DORIS_LITE_BIN=target/debug/doris-lite doris-lite/benches/flight_scan.sh 200000   # skip the build
#
# Loads the rows with Stream Load, then flight_scan.py reports a full-table scan over one stream
# and TABLET(...) scans over 2, 4 and 8 concurrent streams (rows/s, MB/s of Arrow data), each
# against a baseline with the SAME number of streams: pyarrow's own Flight server, in a process of
# its own, serving from memory the same Arrow data split the same way (gRPC, loopback and client
# decoding alone). "doris-lite / baseline" at N streams is doris-lite's rows/s over the baseline's
# at N; "N / 1 stream" is a side's parallel scaling. Needs: cargo, curl, mysql (or mariadb) CLI,
# awk, python3 (pyarrow is installed into the test virtualenv when missing).
set -euo pipefail

ROWS="${1:-5000000}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
VENV="${SLUICE_TEST_VENV:-$CARGO_TARGET_DIR/../doris-lite-venv}"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

if [ -n "${DORIS_LITE_BIN:-}" ]; then
  BIN="$DORIS_LITE_BIN"
else
  echo "building doris-lite (release)…" >&2
  cargo build --profile bench -q -p doris-lite --bin doris-lite --manifest-path "$REPO/Cargo.toml"
  BIN="$CARGO_TARGET_DIR/release/doris-lite"
fi

if ! "$VENV/bin/python" -c "import pyarrow.flight" 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet pyarrow
fi

OUT="$WORK/server.out"
"$BIN" --fe-http-port 0 --be-http-port 0 --query-port 0 --arrow-flight-sql-port 0 >"$OUT" 2>"$WORK/server.err" &
SERVER_PID=$!
for _ in $(seq 1 100); do grep -q '^ready$' "$OUT" 2>/dev/null && break; sleep 0.1; done
FE="$(awk '/^fe_http /{print $2}' "$OUT")"
QPORT="$(awk '/^query /{print $2}' "$OUT" | sed 's/.*://')"
FPORT="$(awk '/^flight_sql /{print $2}' "$OUT" | sed 's/.*://')"
sql() { mysql -h127.0.0.1 -P"$QPORT" -uroot -N -B -e "$1"; }

sql "CREATE DATABASE bench"
sql "CREATE TABLE bench.scan (id BIGINT, k INT, amount DOUBLE, name VARCHAR(32), day DATE) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"
echo "generating and loading $ROWS rows…" >&2
awk -v n="$ROWS" 'BEGIN {
  for (i = 0; i < n; i++)
    printf "%d,%d,%d.%02d,customer_%08d,2024-%02d-%02d\n", i, i % 100000, i % 100000, i % 100, i, i % 12 + 1, i % 28 + 1
}' >"$WORK/data.csv"
STATUS=$(curl -sS --location-trusted -u root: -H "label:scan1" -H "column_separator:," \
  -T "$WORK/data.csv" "http://$FE/api/bench/scan/_stream_load" | awk -F'"' '/"Status"/{print $4}')
[ "$STATUS" = "Success" ] || { echo "load failed: $STATUS" >&2; exit 1; }
rm -f "$WORK/data.csv"
TABLETS="$(sql "SHOW TABLETS FROM bench.scan" | awk '{print $1}' | paste -sd, -)"

printf 'data: %d rows, 5 columns (BIGINT, INT, DOUBLE, VARCHAR, DATE), 8 tablets; %s cores\n' "$ROWS" "$(nproc)"
"$VENV/bin/python" "$HERE/flight_scan.py" "$FPORT" bench scan "$TABLETS"
printf 'server RSS after the scans: %d MB\n' $(( $(awk '/VmRSS/{print $2}' "/proc/$SERVER_PID/status") / 1024 ))
printf 'load average (1, 5, 15 min) at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
