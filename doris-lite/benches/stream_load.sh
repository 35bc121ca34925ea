#!/usr/bin/env bash
# Stream Load throughput of doris-lite (release build), driven by `curl -T` as the Doris docs do.
#
#   doris-lite/benches/stream_load.sh [ROWS]        # default 2,000,000 rows ≈ 100 MB of CSV
#   DORIS_LITE_BIN=target/debug/doris-lite doris-lite/benches/stream_load.sh 100000   # skip the build
#
# Prints MB/s and rows/s for a DUPLICATE and a UNIQUE table, the baseline of the same upload
# into a discarding HTTP sink (curl + loopback cost alone), and the resident memory of a fresh
# server holding 1,000,000 rows. Needs: cargo, curl, mysql (or mariadb) CLI, awk, python3.
set -euo pipefail

ROWS="${1:-2000000}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

if [ -n "${DORIS_LITE_BIN:-}" ]; then
  BIN="$DORIS_LITE_BIN" # e.g. a debug build, to try the script quickly
else
  echo "building doris-lite (release)…" >&2
  cargo build --profile bench -q -p doris-lite --bin doris-lite --manifest-path "$REPO/Cargo.toml"
  BIN="$CARGO_TARGET_DIR/release/doris-lite"
fi

start_server() {
  local out="$WORK/server.$1.out"
  "$BIN" --fe-http-port 0 --be-http-port 0 --query-port 0 --arrow-flight-sql-port 0 >"$out" 2>"$WORK/server.$1.err" &
  PIDS+=("$!")
  SERVER_PID=$!
  for _ in $(seq 1 100); do grep -q '^ready$' "$out" 2>/dev/null && break; sleep 0.1; done
  FE="$(awk '/^fe_http /{print $2}' "$out")"
  QPORT="$(awk '/^query /{print $2}' "$out" | sed 's/.*://')"
}

sql() { mysql -h127.0.0.1 -P"$QPORT" -uroot -N -B -e "$1"; }

now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }

# 5 columns: BIGINT, INT, VARCHAR, DECIMAL(10,2), DATETIME.
gen_csv() {
  awk -v n="$1" 'BEGIN {
    for (i = 0; i < n; i++)
      printf "%d,%d,customer_%08d,%d.%02d,2024-%02d-%02d %02d:%02d:%02d\n",
        i, i % 100000, i, i % 100000, i % 100, i % 12 + 1, i % 28 + 1, i % 24, i % 60, (i * 7) % 60
  }' >"$2"
}

load() { # table file label → prints "seconds loaded_rows status"
  local t0 t1 resp
  t0=$(now)
  resp=$(curl -sS --location-trusted -u root: -H "label:$3" -H "column_separator:," \
    -T "$2" "http://$FE/api/bench/$1/_stream_load")
  t1=$(now)
  local rows status
  rows=$(printf '%s' "$resp" | awk -F': ' '/"NumberLoadedRows"/{gsub(/,/,"",$2); print $2}')
  status=$(printf '%s' "$resp" | awk -F'"' '/"Status"/{print $4}')
  echo "$(calc "$t1 - $t0") $rows $status"
}

CSV="$WORK/data.csv"
echo "generating $ROWS rows…" >&2
gen_csv "$ROWS" "$CSV"
BYTES=$(stat -c %s "$CSV")
MB=$(calc "$BYTES / 1000000")

# Baseline: the same upload into a sink that discards the body.
python3 - "$WORK/sink.port" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        n = int(self.headers.get("Content-Length", 0))
        while n > 0:
            got = self.rfile.read1(min(n, 1 << 20)) if hasattr(self.rfile, "read1") else self.rfile.read(min(n, 1 << 20))
            if not got:
                break
            n -= len(got)
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_port))
s.serve_forever()
PY
PIDS+=("$!")
for _ in $(seq 1 50); do [ -s "$WORK/sink.port" ] && break; sleep 0.1; done
t0=$(now); curl -sS -o /dev/null -H "Expect:" -T "$CSV" "http://127.0.0.1:$(cat "$WORK/sink.port")/"; t1=$(now)
BASE=$(calc "$t1 - $t0")

start_server main
sql "CREATE DATABASE bench"
sql "CREATE TABLE bench.dup (id BIGINT, k INT, name VARCHAR(32), amount DECIMAL(10,2), ts DATETIME) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"
sql "CREATE TABLE bench.uniq (id BIGINT, k INT, name VARCHAR(32), amount DECIMAL(10,2), ts DATETIME) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"

report() { # name seconds rows status
  local mbps rps
  mbps=$(calc "$MB / $2")
  rps=$(calc "$3 / $2")
  printf '%-22s %8.2f s  %8.1f MB/s  %10.0f rows/s  (%s rows, %s)\n' "$1" "$2" "$mbps" "$rps" "$3" "$4"
}

printf 'data: %d rows, %.1f MB of CSV (5 columns)\n' "$ROWS" "$MB"
printf '%-22s %8.2f s  %8.1f MB/s\n' "baseline (discard sink)" "$BASE" "$(calc "$MB / $BASE")"
read -r s r st < <(load dup "$CSV" dup1); report "DUPLICATE" "$s" "$r" "$st"
read -r s r st < <(load uniq "$CSV" uniq1); report "UNIQUE (new keys)" "$s" "$r" "$st"
read -r s r st < <(load uniq "$CSV" uniq2); report "UNIQUE (all upserts)" "$s" "$r" "$st"
t0=$(now); n=$(sql "SELECT count(*) FROM bench.uniq"); t1=$(now)
printf '%-22s %8.2f s  (count = %s, first query builds the snapshot)\n' "SELECT count(*)" "$(calc "$t1 - $t0")" "$n"

# Memory: a fresh server holding 1,000,000 rows.
head -n 1000000 "$CSV" >"$WORK/1m.csv"
start_server mem
sql "CREATE DATABASE bench"
sql "CREATE TABLE bench.dup (id BIGINT, k INT, name VARCHAR(32), amount DECIMAL(10,2), ts DATETIME) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"
IDLE=$(awk '/VmRSS/{print $2}' "/proc/$SERVER_PID/status")
load dup "$WORK/1m.csv" mem1 >/dev/null
RSS=$(awk '/VmRSS/{print $2}' "/proc/$SERVER_PID/status")
HWM=$(awk '/VmHWM/{print $2}' "/proc/$SERVER_PID/status")
printf '1M rows held (DUPLICATE): RSS %d MB (idle %d MB), peak RSS during the load %d MB\n' \
  $((RSS / 1024)) $((IDLE / 1024)) $((HWM / 1024))
