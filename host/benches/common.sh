# Shared by the end-to-end benchmark scripts (sourced, not run): release binaries, a doris-lite
# process on ephemeral ports, a virtualenv for Python clients, and small helpers.
#
# Before sourcing, set REPO (the repository root). Afterwards: $WORK (a temp dir removed on exit),
# bench_binaries (sets $SLUICE and $DORIS), start_doris_lite [FLAG…] (sets $FE, $BE, $QPORT, $FPORT,
# $DORIS_PID), bench_venv CHECK PKG… (sets $PY), sql, now, calc, median, best, track PID (killed
# on exit), profile PID NAME (a CPU profile, with BENCH_PERF_DIR set), and the sync benches'
# stop_sluice, catch_up and catch_up_report.

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-build/release}"
WORK="$(mktemp -d)"
BENCH_PIDS=()
PG_PID=""; PG_RUNNER=""
# What was started stops before its files go: MariaDB on TERM (up to 10 s), PostgreSQL with a fast
# shutdown (SIGINT: it ends the sessions, Sluice's replication connection among them, instead of
# waiting for them).
bench_cleanup() {
  if [ -n "$PG_PID" ]; then kill -INT "$PG_PID" 2>/dev/null || true
  elif [ -n "$PG_RUNNER" ]; then kill "$PG_RUNNER" 2>/dev/null || true; fi
  for p in "${BENCH_PIDS[@]:-}"; do [ -n "$p" ] && [ "$p" != "$PG_PID" ] && kill "$p" 2>/dev/null || true; done
  for _ in $(seq 1 100); do kill -0 "${BENCH_PIDS[@]:-}" $PG_RUNNER 2>/dev/null || break; sleep 0.1; done
  rm -rf "$WORK"
}
trap bench_cleanup EXIT
track() { BENCH_PIDS+=("$1"); }
# With BENCH_PERF_DIR set, a sampled CPU profile of process PID until it exits (or until
# `profile_stop NAME`), in $BENCH_PERF_DIR/NAME.data (`perf report -i … --sort dso,symbol` reads
# it; needs `perf`; BENCH_PERF_CALLS=1 records call stacks too).
#   profile PID NAME
declare -A PROFILERS=()
profile() {
  [ -n "${BENCH_PERF_DIR:-}" ] || return 0
  mkdir -p "$BENCH_PERF_DIR"
  perf record -q -F 499 ${BENCH_PERF_CALLS:+--call-graph dwarf,16384} -p "$1" -o "$BENCH_PERF_DIR/$2.data" >/dev/null 2>&1 &
  PROFILERS[$2]=$!
}
#   profile_stop NAME
profile_stop() {
  local pid="${PROFILERS[$1]:-}"
  [ -n "$pid" ] || return 0
  kill -INT "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}

# $SLUICE_BIN and $DORIS_LITE_BIN when both are set, else release builds of this checkout.
bench_binaries() {
  if [ -n "${SLUICE_BIN:-}" ] && [ -n "${DORIS_LITE_BIN:-}" ]; then
    SLUICE="$SLUICE_BIN"; DORIS="$DORIS_LITE_BIN"
  else
    echo "building sluice and doris-lite (release, bench profile)…" >&2
    cargo build --profile bench -q -p sluice --bin sluice -p doris-lite --bin doris-lite --manifest-path "$REPO/Cargo.toml"
    SLUICE="$CARGO_TARGET_DIR/release/sluice"; DORIS="$CARGO_TARGET_DIR/release/doris-lite"
  fi
}

# A doris-lite process on ephemeral ports, ready to answer; FLAG… are passed on to it.
#   start_doris_lite [FLAG…]
start_doris_lite() {
  "$DORIS" --fe-http-port 0 --be-http-port 0 --query-port 0 --arrow-flight-sql-port 0 "$@" >"$WORK/doris.out" 2>"$WORK/doris.err" &
  DORIS_PID=$!
  track "$DORIS_PID"
  for _ in $(seq 1 100); do grep -q '^ready$' "$WORK/doris.out" 2>/dev/null && break; sleep 0.1; done
  FE="$(awk '/^fe_http /{print $2}' "$WORK/doris.out")"
  BE="$(awk '/^be_http /{print $2}' "$WORK/doris.out")"
  QPORT="$(awk '/^query /{print $2}' "$WORK/doris.out" | sed 's/.*://')"
  FPORT="$(awk '/^flight_sql /{print $2}' "$WORK/doris.out" | sed 's/.*://')"
}

# A virtualenv ($SLUICE_BENCH_VENV, default /var/tmp/sluice-bench-venv) where the Python statement
# CHECK runs, after installing PKG… into it if it did not; sets $PY.   bench_venv CHECK PKG…
bench_venv() {
  local venv="${SLUICE_BENCH_VENV:-/var/tmp/sluice-bench-venv}" check="$1"
  shift
  if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "$@"
  fi
  PY="$venv/bin/python"
}

# A MariaDB of this script (own temp dir, free loopback port, binlog ROW, 1 GB buffer pool,
# innodb_flush_log_at_trx_commit = 2; FLAG… are passed on to mariadbd after these, and override
# them); sets $MPORT, $MARIA_PID and msql SQL.
#   start_mariadb [FLAG…]
start_mariadb() {
  local m="$WORK/maria"
  mkdir -p "$m/tmp"
  mariadb-install-db --no-defaults --auth-root-authentication-method=normal --skip-test-db --user=root \
    --datadir="$m/data" --tmpdir="$m/tmp" >"$m/install.log" 2>&1 || { cat "$m/install.log" >&2; exit 1; }
  MPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mariadbd --no-defaults --datadir="$m/data" --tmpdir="$m/tmp" --port="$MPORT" --bind-address=127.0.0.1 \
    --socket="$m/sock" --pid-file="$m/pid" --log-error="$m/error.log" --log-bin="$m/binlog" --user=root \
    --binlog-format=ROW --server-id=1 --character-set-server=utf8mb4 --innodb-buffer-pool-size=1G \
    --innodb-flush-log-at-trx-commit=2 "$@" >/dev/null 2>&1 &
  MARIA_PID=$!
  track "$MARIA_PID"
  for _ in $(seq 1 300); do msql "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
  msql "SELECT 1" >/dev/null || { echo "MariaDB did not start:" >&2; tail -20 "$m/error.log" >&2; exit 1; }
}
# A PostgreSQL of this script (wal_level = logical, fsync off) in $WORK/pg on a free loopback
# port, run as the `postgres` user when this script runs as root (PostgreSQL refuses root); sets
# $PGPORT, $PG_PID and psql_ ARG….
PGBIN=/usr/lib/postgresql/15/bin
start_postgres() {
  P="$WORK/pg"
  mkdir -p "$P"
  if [ "$(id -u)" = 0 ]; then chmod 711 "$WORK"; chown postgres: "$P"; fi
  as_pg "$PGBIN/initdb" --auth=trust --username=postgres --encoding=UTF8 --no-sync -D "$P/data" >"$WORK/initdb.log" 2>&1 \
    || { cat "$WORK/initdb.log" >&2; exit 1; }
  PGPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_pg "$PGBIN/postgres" -D "$P/data" -p "$PGPORT" -c listen_addresses=127.0.0.1 -c unix_socket_directories="$P" \
    -c wal_level=logical -c max_replication_slots=8 -c max_wal_senders=8 -c fsync=off -c synchronous_commit=off \
    >"$WORK/postgres.log" 2>&1 &
  PG_RUNNER=$!
  for _ in $(seq 1 300); do psql_ -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
  psql_ -c "SELECT 1" >/dev/null || { echo "PostgreSQL did not start:" >&2; tail -20 "$WORK/postgres.log" >&2; exit 1; }
  PG_PID=$(head -1 "$P/data/postmaster.pid")  # the postmaster itself (runuser is its parent)
  track "$PG_PID"
}
as_pg() { if [ "$(id -u)" = 0 ]; then (cd "$P" && exec runuser -u postgres -- "$@"); else (cd "$P" && exec "$@"); fi; }
psql_() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres "$@"; }

msql() { mysql -h127.0.0.1 -P"$MPORT" -uroot -N -B -e "$1"; }
# User + system seconds of process PID so far, its exited children's included (PostgreSQL's
# backends are the postmaster's children).
cpu_of() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15 + $16 + $17) / t}' "/proc/$1/stat"; }

sql() { mysql -h127.0.0.1 -P"$QPORT" -uroot -N -B -e "$1"; }
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { sort -g | head -1; }

# The sync benches' Sluice (its pipeline $WORK/pipeline.toml, its log $WORK/sluice.err) stopped at
# a checkpoint.
stop_sluice() {
  kill -TERM "$SLUICE_PID"
  wait "$SLUICE_PID" || { echo "sluice exited with $?:" >&2; tail -20 "$WORK/sluice.err" >&2; }
}

# Their catch-up: Sluice started again until `helper landed ROWS STAMP` sees every change in Doris;
# sets $C_SECS, $C_RATE (rows/s) and $C_CPU (Sluice's cores), and stops it.
#   catch_up ROWS STAMP
catch_up() {
  local t0 t1
  echo "catch-up: sluice run resumes…" >&2
  t0=$(now)
  SLUICE_LOG=info "$SLUICE" run "$WORK/pipeline.toml" 2>>"$WORK/sluice.err" &
  SLUICE_PID=$!
  track "$SLUICE_PID"
  profile "$SLUICE_PID" sluice-catch-up
  profile "$DORIS_PID" doris-lite-catch-up
  t1=$(helper landed "$1" "$2" 900) || sluice_failed
  profile_stop doris-lite-catch-up
  C_SECS=$(calc "$t1 - $t0")
  C_RATE=$(calc "$1 / $C_SECS")
  C_CPU=$(calc "$(awk '{print $14 + $15}' "/proc/$SLUICE_PID/stat") / $(getconf CLK_TCK) / $C_SECS")
  stop_sluice
}

# The catch-up's line, beside its decode-only floor, in $CATCHUP.
#   catch_up_report FLOOR_DESCRIPTION FLOOR_ROWS FLOOR_SECONDS
catch_up_report() {
  local rate
  rate=$(calc "$2 / $3")
  CATCHUP="$(printf 'catch-up: %d changes written while sluice was stopped, all in Doris %.1f s after it started again = %.0f rows/s (sluice CPU %.2f cores); %s: %d rows in %.2f s = %.0f rows/s; sluice ÷ decode-only %.2f' \
    "$C_ROWS" "$C_SECS" "$C_RATE" "$C_CPU" "$1" "$2" "$3" "$rate" "$(calc "$C_RATE / $rate")")"
}
