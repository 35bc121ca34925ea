#!/usr/bin/env bash
# `sluice verify` of a whole-database mirror: a MariaDB and a PostgreSQL of this script (own temp
# dirs, free loopback ports) with 10 tables of ROWS rows in all (id BIGINT PRIMARY KEY, k INT,
# name VARCHAR(32), amount DECIMAL(12,2), ts BIGINT), each copied into doris-lite by a `sluice run`
# in `snapshot` mode; then `sluice verify` of each pipeline (the copy agrees: every row compared).
# Beside it, the floor: a plain `SELECT *` of every table through the server's own command-line
# client (`mysql -B`, `psql -At`), output thrown away — reading the source once, nothing else.
# Release builds.
#
#   host/benches/verify.sh [ROWS]                                # default 10,000,000 rows per source
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/verify.sh         # skip the build
#
# Prints per source: verify's rows/s compared, its CPU and the source server's CPU (cores, over
# the run), the floor's rows/s and the source's CPU for it, verify ÷ floor, and `verify
# --every-row` (every row read from both sides, no fingerprints) with fingerprints ÷ every row.
# Target: >= 1,000,000 rows/s compared on 2 cores when the tables agree.
# Needs: cargo, mariadb-install-db and mariadbd, PostgreSQL 15 server binaries, mysql (or mariadb)
# CLI, awk, python3.
set -euo pipefail

ROWS="${1:-10000000}"
TABLES=10
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/common.sh"
bench_binaries
start_doris_lite
start_mariadb
start_postgres

PER=$(( ROWS / TABLES ))
TOTAL=$(( PER * TABLES ))
echo "loading $TOTAL rows into MariaDB (port $MPORT) and PostgreSQL (port $PGPORT)…" >&2
msql "CREATE DATABASE app"
for i in $(seq 0 $(( TABLES - 1 ))); do
  msql "USE app; CREATE TABLE t$i (id BIGINT PRIMARY KEY, k INT NOT NULL, name VARCHAR(32) NOT NULL,
          amount DECIMAL(12,2) NOT NULL, ts BIGINT NOT NULL DEFAULT 0);
        INSERT INTO t$i SELECT seq, seq % 1000, CONCAT('customer_', seq), seq % 100000 + 0.25, seq FROM seq_1_to_$PER"
  psql_ -c "CREATE TABLE public.t$i (id BIGINT PRIMARY KEY, k INT NOT NULL, name VARCHAR(32) NOT NULL,
              amount NUMERIC(12,2) NOT NULL, ts BIGINT NOT NULL DEFAULT 0)" \
        -c "INSERT INTO public.t$i SELECT g, g % 1000, 'customer_' || g, g % 100000 + 0.25, g FROM generate_series(1, $PER) g" \
        -c "ANALYZE public.t$i"
done
sql "CREATE DATABASE bench_mysql"
sql "CREATE DATABASE bench_postgres"

cat >"$WORK/mysql.toml" <<TOML
[pipeline]
name = "verify_mysql"
parallelism = 2
state_dir = "$WORK/state-mysql"

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
scan.startup.mode = "snapshot"

[[sink]]
type = "doris"
database = "bench_mysql"
table_properties.replication_num = "1"
TOML

cat >"$WORK/postgres.toml" <<TOML
[pipeline]
name = "verify_postgres"
parallelism = 2
state_dir = "$WORK/state-postgres"

[connections.src]
type = "postgres"
host = "127.0.0.1"
port = $PGPORT
user = "postgres"

[doris]
fenodes = ["$FE"]

[[source]]
type = "postgres"
connection = "src"
database = "postgres"
schema = "public"
slot_name = "verify_bench"
scan.startup.mode = "snapshot"

[[sink]]
type = "doris"
database = "bench_postgres"
table_properties.replication_num = "1"
TOML

# Wall, user and system seconds of a command (its output in $WORK/<name>.out, .err):
#   timed NAME CMD…   sets $WALL and $CPU (user + system, cores = CPU / WALL)
timed() {
  local name=$1
  shift
  local t
  t=$( { TIMEFORMAT='%R %U %S'; time "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; } 2>&1 ) || {
    echo "$name failed:" >&2; tail -20 "$WORK/$name.err" >&2; exit 1; }
  read -r WALL user sys <<<"$t"
  CPU=$(calc "$user + $sys")
}

RESULTS=()
for src in mysql postgres; do
  echo "sluice run: copying $TOTAL rows of $src into doris-lite…" >&2
  timed "copy-$src" "$SLUICE" run --quiet "$WORK/$src.toml"
  COPY=$(calc "$TOTAL / $WALL")
  if [ $src = mysql ]; then SPID=$MARIA_PID; else SPID=$PG_PID; fi

  echo "the floor: SELECT * of every $src table…" >&2
  before=$(cpu_of "$SPID")
  if [ $src = mysql ]; then
    timed "floor-$src" bash -c "for i in \$(seq 0 $(( TABLES - 1 ))); do mysql -h127.0.0.1 -P$MPORT -uroot -N -B -e \"SELECT * FROM app.t\$i\"; done"
  else
    timed "floor-$src" bash -c "for i in \$(seq 0 $(( TABLES - 1 ))); do $PGBIN/psql -X -At -h 127.0.0.1 -p $PGPORT -U postgres -d postgres -c \"SELECT * FROM public.t\$i\"; done"
  fi
  FLOOR_ROWS=$(wc -l <"$WORK/floor-$src.out")
  FLOOR=$(calc "$FLOOR_ROWS / $WALL")
  FLOOR_SRC_CPU=$(calc "($(cpu_of "$SPID") - $before) / $WALL")

  echo "sluice verify of the $src mirror…" >&2
  before=$(cpu_of "$SPID")
  doris_before=$(cpu_of "$DORIS_PID")
  timed "verify-$src" "$SLUICE" verify --recheck-after 0s "$WORK/$src.toml"
  VERIFY_SRC_CPU=$(calc "($(cpu_of "$SPID") - $before) / $WALL")
  VERIFY_DORIS_CPU=$(calc "($(cpu_of "$DORIS_PID") - $doris_before) / $WALL")
  VERIFY_CPU=$(calc "$CPU / $WALL")
  LAST=$(tail -1 "$WORK/verify-$src.out")
  COMPARED=$(sed -n 's/^verify: [0-9]* tables, \([0-9]*\) rows: the copy equals the source$/\1/p' <<<"$LAST")
  [ -n "$COMPARED" ] || { echo "verify of $src did not agree: $LAST" >&2; tail -20 "$WORK/verify-$src.out" >&2; exit 1; }
  VERIFY=$(calc "$COMPARED / $WALL")
  VERIFY_WALL=$WALL

  echo "sluice verify --every-row of the $src mirror (no fingerprints)…" >&2
  timed "rows-$src" "$SLUICE" verify --recheck-after 0s --every-row "$WORK/$src.toml"
  grep -q "the copy equals the source" "$WORK/rows-$src.out" || { echo "verify --every-row of $src did not agree" >&2; exit 1; }
  ROWS_RATE=$(calc "$COMPARED / $WALL")
  RESULTS+=("$(printf '%-8s verify %8.0f rows/s compared (%d rows in %.1f s; sluice %.2f cores, %s %.2f, doris-lite %.2f) · floor SELECT * %8.0f rows/s (%s %.2f cores) · verify/floor %.2f · --every-row %8.0f rows/s (fingerprints ÷ every row %.2f) · copy %.0f rows/s' \
    "$src" "$VERIFY" "$COMPARED" "$VERIFY_WALL" "$VERIFY_CPU" "$src" "$VERIFY_SRC_CPU" "$VERIFY_DORIS_CPU" "$FLOOR" "$src" "$FLOOR_SRC_CPU" "$(calc "$VERIFY / $FLOOR")" "$ROWS_RATE" "$(calc "$VERIFY / $ROWS_RATE")" "$COPY")")
  echo "${RESULTS[-1]}" >&2
  eval "RATE_$src=$VERIFY"
done

echo "--- summary ($(nproc) cores, $TOTAL rows in $TABLES tables per source → doris-lite) ---"
printf '%s\n' "${RESULTS[@]}"
met() { awk "BEGIN { print ($1) ? \"met\" : \"not met\" }"; }
printf 'target: >= 1000000 rows/s compared: mysql %s (%.0f), postgres %s (%.0f)\n' \
  "$(met "$RATE_mysql >= 1000000")" "$RATE_mysql" "$(met "$RATE_postgres >= 1000000")" "$RATE_postgres"
printf 'load average (1, 5, 15 min) at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
