#!/usr/bin/env bash
# End-to-end write throughput: `sluice run` with datagen → passthrough plugin → Doris sink (2PC, csv,
# no compression) into doris-lite, side by side with `curl -T` of a CSV file of the same shape and
# size into the same doris-lite, in the same run. Release builds.
#
#   host/benches/pipeline_sink.sh [ROWS] [PARALLELISM]     # default 2,000,000 rows, parallelism 2
#
# Prints rows/s, MB/s and Sluice's peak RSS, and the ratio to curl. Then the same two against a
# second doris-lite started with --discard-stream-loads, which reads every body to the end and
# answers it (labels, 2PC) without parsing or storing a row: doris-lite parses at ~50 MB/s, which
# caps both clients above; against the discarding one, each shows its own ceiling.
# Needs: cargo, curl, mysql (or mariadb) CLI, awk, GNU time.
set -euo pipefail

ROWS="${1:-2000000}"
PAR="${2:-2}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-build/host}"
PLUGINS_TARGET="${SLUICE_PLUGINS_TARGET_DIR:-$REPO/plugins/target}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "building sluice, doris-lite and the passthrough plugin (release)…" >&2
cargo build --release -q -p sluice --bin sluice -p doris-lite --bin doris-lite --manifest-path "$REPO/Cargo.toml"
CARGO_TARGET_DIR="$PLUGINS_TARGET" cargo build --release -q --target wasm32-wasip2 -p passthrough \
  --manifest-path "$REPO/plugins/Cargo.toml"
# The target dir is shared: run copies, so that another build cannot replace them mid-run.
cp "$CARGO_TARGET_DIR/release/sluice" "$CARGO_TARGET_DIR/release/doris-lite" "$WORK/"
SLUICE="$WORK/sluice"
DORIS="$WORK/doris-lite"
PLUGIN="$PLUGINS_TARGET/wasm32-wasip2/release/passthrough.wasm"

# start_doris NAME [FLAG…]: a doris-lite on ephemeral ports (output in $WORK/NAME.*); sets FE, QPORT
# and DORIS_PID.
start_doris() {
  local name="$1"
  shift
  "$DORIS" --fe-http-port 0 --be-http-port 0 --query-port 0 --arrow-flight-sql-port 0 "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" &
  DORIS_PID=$!
  PIDS+=("$DORIS_PID")
  for _ in $(seq 1 100); do grep -q '^ready$' "$WORK/$name.out" 2>/dev/null && break; sleep 0.1; done
  FE="$(awk '/^fe_http /{print $2}' "$WORK/$name.out")"
  QPORT="$(awk '/^query /{print $2}' "$WORK/$name.out" | sed 's/.*://')"
}
sql() { mysql -h127.0.0.1 -P"$QPORT" -uroot -N -B -e "$1"; }
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }

COLS="id BIGINT, k INT, name VARCHAR(32), amount DECIMAL(10,2), ts DATETIME"
create_tables() {
  sql "CREATE DATABASE bench"
  for t in sluice curl; do
    sql "CREATE TABLE bench.$t ($COLS) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"
  done
}

# write_pipeline DIR: the benchmark pipeline against $FE, in DIR (its state dir is DIR/.sluice).
write_pipeline() {
  mkdir -p "$1"
  cat >"$1/pipeline.toml" <<TOML
[pipeline]
name = "bench"
parallelism = $PAR
checkpoint_interval = "5s"

[doris]
fenodes = ["$FE"]

[[source]]
type = "datagen"
schema = "$COLS"
rows_per_second = 1000000000
number_of_rows = $ROWS
fields.id = { kind = "sequence", start = 0 }
fields.k = { min = 0, max = 99999 }
fields.name = { length = 17 }
fields.amount = { min = 0, max = 99999 }

[[transform]]
type = "wasm"
plugin = "$PLUGIN"

[[sink]]
type = "doris"
table = "bench.sluice"
properties.column_separator = ","
TOML
}

# The same shape as the pipeline's rows: 17-character names, 2-decimal amounts, datetimes.
awk -v n="$ROWS" 'BEGIN {
  for (i = 0; i < n; i++)
    printf "%d,%d,customer_%08d,%d.00,2024-%02d-%02d %02d:%02d:%02d\n",
      i, i % 100000, i, i % 100000, i % 12 + 1, i % 28 + 1, i % 24, i % 60, (i * 7) % 60
}' >"$WORK/data.csv"
BYTES=$(stat -c %s "$WORK/data.csv")

# run_sluice DIR: `sluice run DIR/pipeline.toml`; sets S_SECS, S_WRITTEN (rows Sluice says it
# wrote), S_BYTES (bytes it loaded) and S_RSS (MB).
run_sluice() {
  echo "sluice run ($ROWS rows, parallelism $PAR, $FE)…" >&2
  t0=$(now)
  SLUICE_CACHE_DIR="$WORK/cache" SLUICE_LOG=warn /usr/bin/time -f '%M' -o "$1/rss" "$SLUICE" run "$1/pipeline.toml" 2>"$1/sluice.err"
  t1=$(now)
  S_SECS=$(calc "$t1 - $t0")
  S_WRITTEN=$(sed -n 's/.* \([0-9]*\) rows written.*/\1/p' "$1/sluice.err" | tail -1)
  S_BYTES=$(sed -n 's/.* \([0-9]*\) bytes loaded.*/\1/p' "$1/sluice.err" | tail -1)
  S_RSS=$(( $(cat "$1/rss") / 1024 ))
}

# run_curl OUT: `curl -T` of the CSV file into bench.curl at $FE, reply in OUT; sets C_SECS.
run_curl() {
  echo "curl -T ($BYTES bytes, $FE)…" >&2
  t0=$(now)
  curl -sS --location-trusted -u root: -H "label:curl1" -H "column_separator:," \
    -T "$WORK/data.csv" "http://$FE/api/bench/curl/_stream_load" >"$1"
  t1=$(now)
  C_SECS=$(calc "$t1 - $t0")
}

start_doris doris
create_tables
write_pipeline "$WORK/store"
SLUICE_CACHE_DIR="$WORK/cache" "$SLUICE" plugin inspect "$PLUGIN" >/dev/null # compile the component once
run_sluice "$WORK/store"
S_ROWS=$(sql "SELECT count(*) FROM bench.sluice")
run_curl "$WORK/curl.out"
C_ROWS=$(sql "SELECT count(*) FROM bench.curl")

s_rps=$(calc "$S_ROWS / $S_SECS"); c_rps=$(calc "$C_ROWS / $C_SECS")
s_mbps=$(calc "${S_BYTES:-$BYTES} / 1000000 / $S_SECS"); c_mbps=$(calc "$BYTES / 1000000 / $C_SECS")
printf 'rows: %d, 5 columns; machine: %s cores\n' "$ROWS" "$(nproc)"
printf '%-36s %7.2f s  %10.0f rows/s  %7.1f MB/s  peak RSS %d MB  (%s rows)\n' \
  "sluice run (2PC, csv, parallelism $PAR)" "$S_SECS" "$s_rps" "$s_mbps" "$S_RSS" "$S_ROWS"
printf '%-36s %7.2f s  %10.0f rows/s  %7.1f MB/s  (%s rows)\n' "curl -T (one load)" "$C_SECS" "$c_rps" "$c_mbps" "$C_ROWS"
printf 'sluice / curl throughput: %.2f  (target >= 0.8)\n' "$(calc "$s_rps / $c_rps")"

# The same against a doris-lite that discards what it receives. The storing one goes first, so it
# holds no memory or CPU during this part.
kill "$DORIS_PID" 2>/dev/null || true
wait "$DORIS_PID" 2>/dev/null || true
start_doris discard --discard-stream-loads
create_tables
write_pipeline "$WORK/discard"
run_sluice "$WORK/discard"
D_S_SECS=$S_SECS D_S_ROWS=$S_WRITTEN D_S_BYTES=$S_BYTES D_S_RSS=$S_RSS
run_curl "$WORK/curl-discard.out"
D_C_SECS=$C_SECS
D_C_ROWS=$(sed -n 's/.*"NumberLoadedRows": *\([0-9]*\).*/\1/p' "$WORK/curl-discard.out")
D_KEPT=$(sql "SELECT (SELECT count(*) FROM bench.sluice) + (SELECT count(*) FROM bench.curl)")
ds_rps=$(calc "$D_S_ROWS / $D_S_SECS"); dc_rps=$(calc "${D_C_ROWS:-0} / $D_C_SECS")
ds_mbps=$(calc "${D_S_BYTES:-$BYTES} / 1000000 / $D_S_SECS"); dc_mbps=$(calc "$BYTES / 1000000 / $D_C_SECS")
printf "discarding doris-lite (the sink's own ceiling: bodies read and dropped, 2PC as usual; %s rows kept):\n" "$D_KEPT"
printf '%-36s %7.2f s  %10.0f rows/s  %7.1f MB/s  peak RSS %d MB  (%s rows written)\n' \
  "sluice run (2PC, csv, parallelism $PAR)" "$D_S_SECS" "$ds_rps" "$ds_mbps" "$D_S_RSS" "$D_S_ROWS"
printf '%-36s %7.2f s  %10.0f rows/s  %7.1f MB/s  (%s rows answered)\n' "curl -T (one load)" "$D_C_SECS" "$dc_rps" "$dc_mbps" "${D_C_ROWS:-?}"
printf 'sluice / curl throughput, discarding doris-lite: %.2f\n' "$(calc "$ds_rps / $dc_rps")"
printf 'sluice, discarding / storing doris-lite: %.2f;  curl, discarding / storing: %.2f\n' \
  "$(calc "$ds_rps / $s_rps")" "$(calc "$dc_rps / $c_rps")"
printf 'load average (1, 5, 15 min) at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
