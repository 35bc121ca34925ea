#!/usr/bin/env bash
# Parallel snapshots by key type: a MariaDB of this script (own temp dir, free loopback port) with
# two tables of ROWS rows and the same columns, one keyed by a BIGINT (`id`), one by a composite
# key of text and an integer (`PRIMARY KEY (tenant, seq)`, cut into chunks at key values read from
# its index); each read by `sluice run` (`scan.startup.mode = "snapshot"`, parallelism 2) into
# doris-lite, alone, and timed from its start until it exits with every row in Doris. Release builds.
#
#   host/benches/snapshot_keys.sh [ROWS]                          # default 10,000,000 rows per table
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/snapshot_keys.sh   # skip the build
#
# Prints each table's rows/s, Sluice's CPU, and composite ÷ integer. Target: >= 0.8.
# Needs: cargo, mariadb-install-db and mariadbd, mysql (or mariadb) CLI, awk.
set -euo pipefail

ROWS="${1:-10000000}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/common.sh"
bench_binaries
start_doris_lite
start_mariadb

echo "loading 2 × $ROWS rows into MariaDB (port $MPORT)…" >&2
msql "CREATE DATABASE app; USE app;
  CREATE TABLE by_int (id BIGINT PRIMARY KEY, tenant VARCHAR(16) NOT NULL, seq INT NOT NULL,
    name VARCHAR(32) NOT NULL, amount DECIMAL(12,2) NOT NULL);
  CREATE TABLE by_pair (tenant VARCHAR(16) NOT NULL, seq INT NOT NULL, id BIGINT NOT NULL,
    name VARCHAR(32) NOT NULL, amount DECIMAL(12,2) NOT NULL, PRIMARY KEY (tenant, seq));
  INSERT INTO by_int SELECT seq, CONCAT('tenant-', seq % 97), seq DIV 97, CONCAT('customer_', seq), seq % 100000 + 0.25
    FROM seq_1_to_$ROWS;
  INSERT INTO by_pair SELECT tenant, seq, id, name, amount FROM by_int"
sql "CREATE DATABASE bench"

# One table's snapshot: its rows/s and Sluice's CPU (cores).
snapshot() {
  local table="$1"
  cat >"$WORK/$table.toml" <<TOML
[pipeline]
name = "snap_$table"
parallelism = 2
checkpoint_interval = "2s"
state_dir = "$WORK/state_$table"

[connections.src]
type = "mysql"
host = "127.0.0.1"
port = $MPORT
user = "root"

[doris]
fenodes = ["$FE"]

[[source]]
type = "mysql"
connection = "src"
database = "app"
include = "$table"
scan.startup.mode = "snapshot"

[[sink]]
type = "doris"
database = "bench"
table_properties.replication_num = "1"
TOML
  echo "sluice run: snapshot of app.$table…" >&2
  local t0 t1 cpu n
  t0=$(now)
  SLUICE_LOG=info "$SLUICE" run "$WORK/$table.toml" 2>"$WORK/$table.err" &
  local pid=$!
  track "$pid"
  cpu=0
  while kill -0 "$pid" 2>/dev/null; do
    cpu=$(cpu_of "$pid" 2>/dev/null || echo "$cpu")
    sleep 0.2
  done
  wait "$pid" || { tail -20 "$WORK/$table.err" >&2; exit 1; }
  t1=$(now)
  n=$(sql "SELECT COUNT(*) FROM bench.$table")
  [ "$n" = "$ROWS" ] || { echo "app.$table: $n of $ROWS rows in Doris" >&2; tail -20 "$WORK/$table.err" >&2; exit 1; }
  echo "$(calc "$ROWS / ($t1 - $t0)") $(calc "$cpu / ($t1 - $t0)") $(calc "$t1 - $t0")"
}

read -r INT_RATE INT_CPU INT_SECS <<<"$(snapshot by_int)"
read -r PAIR_RATE PAIR_CPU PAIR_SECS <<<"$(snapshot by_pair)"
RATIO=$(calc "$PAIR_RATE / $INT_RATE")
echo "--- summary ($(nproc) cores, $(mariadbd --version | awk '{print $3}') → doris-lite, parallelism 2, $ROWS rows per table) ---"
printf 'BIGINT key:                  %.1f s = %.0f rows/s; sluice CPU %.2f cores\n' "$INT_SECS" "$INT_RATE" "$INT_CPU"
printf 'composite key (text, int):   %.1f s = %.0f rows/s; sluice CPU %.2f cores\n' "$PAIR_SECS" "$PAIR_RATE" "$PAIR_CPU"
printf 'composite / integer: %.2f (target >= 0.8: %s)\n' "$RATIO" "$(awk "BEGIN { print ($RATIO >= 0.8) ? \"met\" : \"not met\" }")"
