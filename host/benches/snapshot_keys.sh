#!/usr/bin/env bash
# Parallel snapshots by key type: a MariaDB of this script (own temp dir, free loopback port) with
# two tables of ROWS rows and the same columns, one keyed by a BIGINT (`id`), one by a composite
# key of text and an integer (`PRIMARY KEY (tenant, seq)`, cut into chunks at key values read from
# its index); each read by `sluice run` (`scan.startup.mode = "snapshot"`, parallelism 2) into a
# doris-lite of its own, alone, and timed from its start until it exits with every row in Doris.
# The server's writes of the load are flushed first; each table is read twice (integer first, then
# composite first) and the better run counts. Release builds.
#
#   host/benches/snapshot_keys.sh [ROWS]                          # default 10,000,000 rows per table
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/snapshot_keys.sh   # skip the build
#   SLUICE_BASE_BIN=… host/benches/snapshot_keys.sh               # and an earlier build, in the same run
#
# Prints each table's rows/s, the CPU of Sluice, MariaDB and doris-lite, how long the composite
# table's cutting took, and composite ÷ integer (target: >= 0.8); with SLUICE_BASE_BIN, the same
# for that build.
# Needs: cargo, mariadb-install-db and mariadbd, mysql (or mariadb) CLI, awk.
set -euo pipefail

ROWS="${1:-10000000}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/common.sh"
bench_binaries
# Both tables stay in MariaDB's buffer pool (neither run pays for reading the other's pages back),
# and each table is read into a doris-lite of its own (neither pays for the rows of the other).
start_mariadb --innodb-buffer-pool-size=$(( ROWS / 1000000 * 300 + 256 ))M
DORIS_PID=""

echo "loading 2 × $ROWS rows into MariaDB (port $MPORT)…" >&2
msql "CREATE DATABASE app; USE app;
  CREATE TABLE by_int (id BIGINT PRIMARY KEY, tenant VARCHAR(16) NOT NULL, seq INT NOT NULL,
    name VARCHAR(32) NOT NULL, amount DECIMAL(12,2) NOT NULL);
  CREATE TABLE by_pair (tenant VARCHAR(16) NOT NULL, seq INT NOT NULL, id BIGINT NOT NULL,
    name VARCHAR(32) NOT NULL, amount DECIMAL(12,2) NOT NULL, PRIMARY KEY (tenant, seq));
  INSERT INTO by_int SELECT seq, CONCAT('tenant-', seq % 97), seq DIV 97, CONCAT('customer_', seq), seq % 100000 + 0.25
    FROM seq_1_to_$ROWS;
  INSERT INTO by_pair SELECT tenant, seq, id, name, amount FROM by_int"

# A fresh doris-lite, with the database the snapshots write to.
fresh_doris() {
  if [ -n "$DORIS_PID" ]; then kill "$DORIS_PID"; wait "$DORIS_PID" 2>/dev/null || true; fi
  start_doris_lite
  sql "CREATE DATABASE bench"
}

# The load's dirty pages written and the files synced: no run pays for them.
msql "SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0; SET GLOBAL innodb_max_dirty_pages_pct = 0"
for _ in $(seq 1 300); do
  [ "$(msql "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'" | awk '{print $2}')" = 0 ] && break
  sleep 1
done
sync

# One table's snapshot by the sluice binary $2; sets $RESULT: its rows/s, seconds, and the CPU
# (cores) of Sluice, MariaDB and doris-lite.
#   snapshot TABLE SLUICE
snapshot() {
  local table="$1" sluice="$2"
  fresh_doris
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
  local t0 t1 cpu n maria0 doris0
  maria0=$(cpu_of "$MARIA_PID"); doris0=$(cpu_of "$DORIS_PID")
  t0=$(now)
  rm -rf "$WORK/state_$table"
  SLUICE_LOG=info "$sluice" run "$WORK/$table.toml" 2>"$WORK/$table.err" &
  local pid=$!
  track "$pid"
  profile "$pid" "sluice-$table"
  cpu=0
  while kill -0 "$pid" 2>/dev/null; do
    cpu=$(cpu_of "$pid" 2>/dev/null || echo "$cpu")
    sleep 0.2
  done
  wait "$pid" || { tail -20 "$WORK/$table.err" >&2; exit 1; }
  t1=$(now)
  n=$(sql "SELECT COUNT(*) FROM bench.$table")
  [ "$n" = "$ROWS" ] || { echo "app.$table: $n of $ROWS rows in Doris" >&2; tail -20 "$WORK/$table.err" >&2; exit 1; }
  local wall; wall=$(calc "$t1 - $t0")
  RESULT="$(calc "$ROWS / $wall") $(calc "$cpu / $wall") $wall $(calc "($(cpu_of "$MARIA_PID") - $maria0) / $wall") $(calc "($(cpu_of "$DORIS_PID") - $doris0) / $wall")"
}

# The better of two runs of each table by build $1 ("new" or "base"), the integer-keyed table
# first in the first round, the composite one first in the second; sets RATE_<table>_<build> and
# LINE_<table>_<build>.
best_of_two() {
  local build="$1" bin="$2" round table rate wall cpu maria doris
  for round in 1 2; do
    for table in $([ $round = 1 ] && echo by_int by_pair || echo by_pair by_int); do
      snapshot "$table" "$bin"
      read -r rate cpu wall maria doris <<<"$RESULT"
      local best="RATE_${table}_$build"
      if [ -z "${!best:-}" ] || awk "BEGIN { exit !($rate > ${!best}) }"; then
        printf -v "RATE_${table}_$build" '%s' "$rate"
        printf -v "LINE_${table}_$build" '%.1f s = %.0f rows/s; CPU (cores): sluice %.2f, mariadbd %.2f, doris-lite %.2f' \
          "$wall" "$rate" "$cpu" "$maria" "$doris"
      fi
      if [ "$table" = by_pair ]; then
        CUT=$(grep -o 'cut `app.by_pair` into [0-9]* chunks [^"]*' "$WORK/by_pair.err" | head -1 || true)
      fi
    done
  done
}

report() {
  local build="$1" int pair
  int="RATE_by_int_$build"; pair="RATE_by_pair_$build"
  RATIO=$(calc "${!pair} / ${!int}")
  local li="LINE_by_int_$build" lp="LINE_by_pair_$build"
  printf '%-28s %s\n' "BIGINT key:" "${!li}" "composite key (text, int):" "${!lp}"
  printf 'composite / integer: %.2f (target >= 0.8: %s)\n' "$RATIO" "$(awk "BEGIN { print ($RATIO >= 0.8) ? \"met\" : \"not met\" }")"
}

best_of_two new "$SLUICE"
NEW_CUT="$CUT"
[ -n "${SLUICE_BASE_BIN:-}" ] && best_of_two base "$SLUICE_BASE_BIN"
echo "--- summary ($(nproc) cores, $(mariadbd --version | awk '{print $3}') → doris-lite, parallelism 2, $ROWS rows per table, best of two runs) ---"
report new
[ -n "$NEW_CUT" ] && echo "composite key: $NEW_CUT"
if [ -n "${SLUICE_BASE_BIN:-}" ]; then
  echo "--- the same, by $SLUICE_BASE_BIN ---"
  report base
  printf 'this build ÷ that one: BIGINT %.2f, composite %.2f\n' "$(calc "$RATE_by_int_new / $RATE_by_int_base")" \
    "$(calc "$RATE_by_pair_new / $RATE_by_pair_base")"
fi
