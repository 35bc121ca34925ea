#!/usr/bin/env bash
# End-to-end write throughput: `sluice run` with datagen → passthrough plugin → Doris sink (2PC, csv,
# no compression) into doris-lite, side by side with `curl -T` of a CSV file of the same shape and
# size into the same doris-lite, in the same run. Release builds.
#
#   host/benches/pipeline_sink.sh [ROWS] [PARALLELISM]     # default 2,000,000 rows, parallelism 2
#
# Prints rows/s, MB/s and Sluice's peak RSS, and the ratio to curl.
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
SLUICE="$CARGO_TARGET_DIR/release/sluice"
DORIS="$CARGO_TARGET_DIR/release/doris-lite"
PLUGIN="$PLUGINS_TARGET/wasm32-wasip2/release/passthrough.wasm"

"$DORIS" --fe-http-port 0 --be-http-port 0 --query-port 0 --arrow-flight-sql-port 0 >"$WORK/doris.out" 2>"$WORK/doris.err" &
PIDS+=("$!")
for _ in $(seq 1 100); do grep -q '^ready$' "$WORK/doris.out" 2>/dev/null && break; sleep 0.1; done
FE="$(awk '/^fe_http /{print $2}' "$WORK/doris.out")"
QPORT="$(awk '/^query /{print $2}' "$WORK/doris.out" | sed 's/.*://')"
sql() { mysql -h127.0.0.1 -P"$QPORT" -uroot -N -B -e "$1"; }
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }

COLS="id BIGINT, k INT, name VARCHAR(32), amount DECIMAL(10,2), ts DATETIME"
sql "CREATE DATABASE bench"
for t in sluice curl; do
  sql "CREATE TABLE bench.$t ($COLS) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"
done

cat >"$WORK/pipeline.toml" <<TOML
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

# The same shape as the pipeline's rows: 17-character names, 2-decimal amounts, datetimes.
awk -v n="$ROWS" 'BEGIN {
  for (i = 0; i < n; i++)
    printf "%d,%d,customer_%08d,%d.00,2024-%02d-%02d %02d:%02d:%02d\n",
      i, i % 100000, i, i % 100000, i % 12 + 1, i % 28 + 1, i % 24, i % 60, (i * 7) % 60
}' >"$WORK/data.csv"
BYTES=$(stat -c %s "$WORK/data.csv")

echo "sluice run ($ROWS rows, parallelism $PAR)…" >&2
SLUICE_CACHE_DIR="$WORK/cache" "$SLUICE" plugin inspect "$PLUGIN" >/dev/null # compile the component once
t0=$(now)
SLUICE_CACHE_DIR="$WORK/cache" SLUICE_LOG=warn /usr/bin/time -f '%M' -o "$WORK/rss" "$SLUICE" run "$WORK/pipeline.toml" 2>"$WORK/sluice.err"
t1=$(now)
S_SECS=$(calc "$t1 - $t0")
S_ROWS=$(sql "SELECT count(*) FROM bench.sluice")
S_BYTES=$(sed -n 's/.* \([0-9]*\) bytes loaded.*/\1/p' "$WORK/sluice.err" | tail -1)
S_RSS=$(( $(cat "$WORK/rss") / 1024 ))

echo "curl -T ($BYTES bytes)…" >&2
t0=$(now)
curl -sS --location-trusted -u root: -H "label:curl1" -H "column_separator:," \
  -T "$WORK/data.csv" "http://$FE/api/bench/curl/_stream_load" >"$WORK/curl.out"
t1=$(now)
C_SECS=$(calc "$t1 - $t0")
C_ROWS=$(sql "SELECT count(*) FROM bench.curl")

s_rps=$(calc "$S_ROWS / $S_SECS"); c_rps=$(calc "$C_ROWS / $C_SECS")
s_mbps=$(calc "${S_BYTES:-$BYTES} / 1000000 / $S_SECS"); c_mbps=$(calc "$BYTES / 1000000 / $C_SECS")
printf 'rows: %d, 5 columns; machine: %s cores\n' "$ROWS" "$(nproc)"
printf '%-36s %7.2f s  %10.0f rows/s  %7.1f MB/s  peak RSS %d MB  (%s rows)\n' \
  "sluice run (2PC, csv, parallelism $PAR)" "$S_SECS" "$s_rps" "$s_mbps" "$S_RSS" "$S_ROWS"
printf '%-36s %7.2f s  %10.0f rows/s  %7.1f MB/s  (%s rows)\n' "curl -T (one load)" "$C_SECS" "$c_rps" "$c_mbps" "$C_ROWS"
printf 'sluice / curl throughput: %.2f  (target >= 0.8)\n' "$(calc "$s_rps / $c_rps")"
