#!/usr/bin/env bash
# End-to-end write throughput: `sluice run` with datagen → passthrough plugin → Doris sink (2PC, csv,
# no compression) into doris-lite, side by side with `curl -T` of a CSV file of the same shape and
# size into the same doris-lite, in the same run. Release builds.
#
#   host/benches/pipeline_sink.sh [ROWS] [PARALLELISM]     # default 2,000,000 rows, parallelism 2
#   RUNS=5 host/benches/pipeline_sink.sh                   # rounds per doris-lite (default 3, >= 3)
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/pipeline_sink.sh    # skip the sluice/doris-lite build
#   SLUICE_PLUGINS_TARGET_DIR=…                            # where the passthrough plugin is built
#
# Three doris-lites, one after the other: a storing one, then one started with
# --discard-stream-loads, which reads every body to the end and answers it (labels, 2PC) without
# parsing or storing a row: doris-lite's parsing caps both clients on the storing one; against the
# discarding one, each shows its own ceiling. Last, a storing one serving TLS (--tls-cert, a CA
# made by openssl for the run): sluice with `enable_tls` and curl with `--cacert`, both over https
# straight to the BE (the FE's 307 names the BE in plain http, which Sluice refuses), reported
# beside the plain-HTTP figures.
#
# Against each, RUNS rounds; each round runs both clients, one after the other, and which goes first
# alternates (round 1: sluice then curl, round 2: curl then sluice, …), so that neither always runs on
# a warmer or a busier machine. Every run loads into EMPTY tables (both bench tables are truncated
# before it); every `sluice run` has a fresh pipeline directory, so a fresh state dir (it does not
# resume a finished checkpoint) and fresh labels; every curl load has its own label. After each run
# the rows are checked: on the storing doris-lite, the loaded table must hold exactly ROWS rows; on
# the discarding one, the client must have been told ROWS rows (sluice: "rows written", curl:
# NumberLoadedRows) and the table must hold none. Otherwise the script fails.
#
# The numbers, for one run: seconds = wall clock from starting the client to its exit (sluice:
# process start, plugin instantiation, reading, loading and the 2PC commits; curl: its one Stream
# Load); rows/s = ROWS / seconds; MB/s = bytes of load bodies (sluice: the bytes it says it loaded;
# curl: the CSV file) / 10^6 / seconds; peak RSS = Sluice's maximum resident set (GNU time). Each
# run is printed; then, per client, the MEDIAN over the RUNS runs of each figure (each column its
# own median). Every ratio is of medians of rows/s: sluice / curl on each doris-lite, and
# discarding / storing for each client. The load average at the end says how busy the machine was.
# Needs: cargo, curl, mysql (or mariadb) CLI, awk, GNU time, openssl.
set -euo pipefail

ROWS="${1:-2000000}"
PAR="${2:-2}"
RUNS="${RUNS:-3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-build/host}"
PLUGINS_TARGET="${SLUICE_PLUGINS_TARGET_DIR:-$REPO/plugins/target}"
source "$HERE/common.sh"
[[ "$RUNS" =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 3 ] || { echo "RUNS must be a whole number >= 3, not '$RUNS'" >&2; exit 2; }

bench_binaries
echo "building the passthrough plugin (release)…" >&2
CARGO_TARGET_DIR="$PLUGINS_TARGET" cargo build --release -q --target wasm32-wasip2 -p passthrough \
  --manifest-path "$REPO/plugins/Cargo.toml"
# The target dir is shared: run copies, so that another build cannot replace them mid-run.
cp "$SLUICE" "$WORK/sluice"
cp "$DORIS" "$WORK/doris-lite"
SLUICE="$WORK/sluice"
DORIS="$WORK/doris-lite"
PLUGIN="$PLUGINS_TARGET/wasm32-wasip2/release/passthrough.wasm"

COLS="id BIGINT, k INT, name VARCHAR(32), amount DECIMAL(10,2), ts DATETIME"
create_tables() {
  sql "CREATE DATABASE bench"
  for t in sluice curl; do
    sql "CREATE TABLE bench.$t ($COLS) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"
  done
}

# The [doris] keys of a TLS run ($TLS_CA set): https straight to the BE, trusting $TLS_CA.
tls_section() {
  [ -n "$TLS_CA" ] || return 0
  printf 'auto_redirect = false\nbenodes = ["%s"]\nenable_tls = true\ntls_ca_certificate_path = "%s"\n' "$BE" "$TLS_CA"
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
$(tls_section)

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

# check_rows MODE CLIENT TOLD ROUND: exits unless the run loaded $ROWS rows: counted in bench.CLIENT
# on a storing doris-lite (plain or TLS); on the discarding one, TOLD (what the client was told it
# loaded), with bench.CLIENT empty.
check_rows() {
  local kept n
  kept=$(sql "SELECT count(*) FROM bench.$2")
  if [ "$1" != discarding ]; then n=$kept; else n=$3; fi
  if [ "$n" != "$ROWS" ] || { [ "$1" = discarding ] && [ "$kept" != 0 ]; }; then
    echo "FAILED: $1 doris-lite, $2 round $4: $n rows loaded, $kept kept; expected $ROWS loaded" >&2
    exit 1
  fi
}

LINE='%-36s %7.2f s  %10.0f rows/s  %7.1f MB/s'
SLUICE_NAME="sluice run (2PC, csv, parallelism $PAR)"
CURL_NAME="curl -T (one load)"

# record MODE CLIENT ROUND SECS BODY_BYTES [RSS_MB]: prints the run and appends
# "secs rows/s MB/s [rss]" to $WORK/MODE.CLIENT.
record() {
  local rps mbps
  rps=$(calc "$ROWS / $4")
  mbps=$(calc "$5 / 1000000 / $4")
  echo "$4 $rps $mbps ${6:-}" >>"$WORK/$1.$2"
  if [ -n "${6:-}" ]; then
    printf "  round %d: $LINE  peak RSS %d MB\n" "$3" "$SLUICE_NAME" "$4" "$rps" "$mbps" "$6"
  else
    printf "  round %d: $LINE\n" "$3" "$CURL_NAME" "$4" "$rps" "$mbps"
  fi
}

# run_sluice MODE ROUND: `sluice run` from a fresh pipeline directory into bench.sluice at $FE.
run_sluice() {
  local dir="$WORK/$1-$2-sluice" t0 t1 written bytes
  write_pipeline "$dir"
  echo "$1 doris-lite, round $2: sluice run ($ROWS rows, parallelism $PAR, $FE)…" >&2
  t0=$(now)
  if ! SLUICE_CACHE_DIR="$WORK/cache" SLUICE_LOG=warn /usr/bin/time -f '%M' -o "$dir/rss" \
    "$SLUICE" run "$dir/pipeline.toml" 2>"$dir/sluice.err"; then
    echo "FAILED: sluice run ($1 doris-lite, round $2):" >&2
    tail -20 "$dir/sluice.err" >&2
    exit 1
  fi
  t1=$(now)
  written=$(sed -n 's/.* \([0-9]*\) rows written.*/\1/p' "$dir/sluice.err" | tail -1)
  bytes=$(sed -n 's/.* \([0-9]*\) bytes loaded.*/\1/p' "$dir/sluice.err" | tail -1)
  check_rows "$1" sluice "${written:-?}" "$2"
  record "$1" sluice "$2" "$(calc "$t1 - $t0")" "${bytes:-$BYTES}" "$(($(tail -1 "$dir/rss") / 1024))"
}

# run_curl MODE ROUND: `curl -T` of the CSV file into bench.curl at $FE, with a label of its own.
run_curl() {
  local out="$WORK/$1-$2-curl.out" t0 t1 status answered url tls
  echo "$1 doris-lite, round $2: curl -T ($BYTES bytes, $FE)…" >&2
  t0=$(now)
  if [ -n "$TLS_CA" ]; then
    tls=(--cacert "$TLS_CA"); url="https://$BE/api/bench/curl/_stream_load"
  else
    tls=(); url="http://$FE/api/bench/curl/_stream_load"
  fi
  curl -sS --location-trusted -u root: -H "label:curl_$1_$2" -H "column_separator:," \
    "${tls[@]}" -T "$WORK/data.csv" "$url" >"$out"
  t1=$(now)
  status=$(sed -n 's/.*"Status": *"\([^"]*\)".*/\1/p' "$out" | head -1)
  [ "$status" = Success ] || { echo "FAILED: curl -T ($1 doris-lite, round $2): $(cat "$out")" >&2; exit 1; }
  answered=$(sed -n 's/.*"NumberLoadedRows": *\([0-9]*\).*/\1/p' "$out")
  check_rows "$1" curl "${answered:-?}" "$2"
  record "$1" curl "$2" "$(calc "$t1 - $t0")" "$BYTES"
}

# bench MODE: RUNS rounds of both clients against the doris-lite at $FE, alternating which goes
# first, each run into empty tables; sets MED_SLUICE and MED_CURL ("secs rows/s MB/s [rss]").
bench() {
  local r c order
  echo "$1 doris-lite, each run (rows/s = $ROWS / seconds):"
  for r in $(seq 1 "$RUNS"); do
    if ((r % 2)); then order="sluice curl"; else order="curl sluice"; fi
    for c in $order; do
      sql "TRUNCATE TABLE bench.sluice"
      sql "TRUNCATE TABLE bench.curl"
      "run_$c" "$1" "$r"
    done
  done
  MED_SLUICE=$(medians "$WORK/$1.sluice")
  MED_CURL=$(medians "$WORK/$1.curl")
}

# medians FILE: the median of each column of FILE, on one line.
medians() {
  local i cols out=""
  cols=$(awk '{ print NF; exit }' "$1")
  for i in $(seq 1 "$cols"); do out="$out $(awk -v i="$i" '{ print $i }' "$1" | median)"; done
  echo "$out"
}

# report_medians MODE: the median lines of MED_SLUICE and MED_CURL.
report_medians() {
  local s_secs s_rps s_mbps s_rss c_secs c_rps c_mbps
  read -r s_secs s_rps s_mbps s_rss <<<"$MED_SLUICE"
  read -r c_secs c_rps c_mbps <<<"$MED_CURL"
  echo "$1 doris-lite, median of $RUNS runs ($ROWS rows each, verified):"
  printf "$LINE  peak RSS %d MB\n" "$SLUICE_NAME" "$s_secs" "$s_rps" "$s_mbps" "$s_rss"
  printf "$LINE\n" "$CURL_NAME" "$c_secs" "$c_rps" "$c_mbps"
}

printf 'rows: %d, 5 columns; machine: %s cores; %d rounds per doris-lite, alternating which client goes first, every run into an empty table\n' \
  "$ROWS" "$(nproc)" "$RUNS"
SLUICE_CACHE_DIR="$WORK/cache" "$SLUICE" plugin inspect "$PLUGIN" >/dev/null # compile the component once

# phase MODE TITLE [FLAG…]: a doris-lite started with FLAG… (the previous one stopped first, so it
# holds no memory or CPU), both clients against it; sets P_SLUICE and P_CURL (median rows/s).
phase() {
  local mode="$1" title="$2"
  shift 2
  if [ -n "${DORIS_PID:-}" ]; then kill "$DORIS_PID" 2>/dev/null || true; wait "$DORIS_PID" 2>/dev/null || true; fi
  start_doris_lite "$@"
  create_tables
  echo "$title"
  bench "$mode"
  report_medians "$mode"
  P_SLUICE=$(echo "$MED_SLUICE" | awk '{ print $2 }')
  P_CURL=$(echo "$MED_CURL" | awk '{ print $2 }')
}

TLS_CA=""
phase storing "storing doris-lite:"
s_rps=$P_SLUICE c_rps=$P_CURL
printf 'sluice / curl throughput (medians): %.2f  (target >= 0.8)\n' "$(calc "$s_rps / $c_rps")"

# The same against a doris-lite that discards what it receives.
phase discarding "discarding doris-lite (the sink's own ceiling: bodies read and dropped, 2PC as usual; no rows kept):" \
  --discard-stream-loads
ds_rps=$P_SLUICE dc_rps=$P_CURL
printf 'sluice / curl throughput, discarding doris-lite (medians): %.2f\n' "$(calc "$ds_rps / $dc_rps")"
printf 'sluice, discarding / storing doris-lite (medians): %.2f;  curl, discarding / storing: %.2f\n' \
  "$(calc "$ds_rps / $s_rps")" "$(calc "$dc_rps / $c_rps")"

# Over TLS: a storing doris-lite serving https with a certificate of a CA made for this run.
PKI="$WORK/pki"
mkdir -p "$PKI"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "/CN=sluice bench CA" \
  -keyout "$PKI/ca.key" -out "$PKI/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$PKI/server.key" -out "$PKI/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$PKI/ext"
openssl x509 -req -in "$PKI/server.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca.key" -CAcreateserial -days 1 \
  -extfile "$PKI/ext" -out "$PKI/server.pem" 2>/dev/null
TLS_CA="$PKI/ca.pem"
phase tls "storing doris-lite over TLS (both clients over https straight to the BE):" \
  --tls-cert "$PKI/server.pem" --tls-key "$PKI/server.key"
printf 'sluice / curl throughput over TLS (medians): %.2f\n' "$(calc "$P_SLUICE / $P_CURL")"
printf 'over TLS / plain HTTP (medians, storing doris-lite): sluice %.2f;  curl %.2f\n' \
  "$(calc "$P_SLUICE / $s_rps")" "$(calc "$P_CURL / $c_rps")"
printf 'load average (1, 5, 15 min) at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
