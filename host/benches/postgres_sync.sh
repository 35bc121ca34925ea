#!/usr/bin/env bash
# PostgreSQL → Doris whole-schema sync: a PostgreSQL 15 of this script (own temp dir, free loopback
# port, wal_level = logical, fsync and synchronous_commit off) with 10 tables of ROWS rows in all in
# `public`; `sluice run` of a `type = "postgres"` source (slot and publication `bench`, pgoutput,
# `scan.startup.mode = "initial"`, parallelism 2, checkpoint 1 s) into doris-lite's `bench`
# database, tables created by the sink. Once a marker row shows it follows the slot, a load
# generator writes 10 k, then 50 k rows/s for SECONDS each: every 100 ms, per table, one transaction
# of a multi-row INSERT and a ranged UPDATE (about half each), each row stamped `ts` = the wall-clock
# µs of its write. Release builds.
#
#   host/benches/postgres_sync.sh [ROWS] [SECONDS] [CHANGES]       # default 1,000,000 rows, 20 s per rate, 2,000,000 changes
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/postgres_sync.sh    # skip the build
#
# Prints the snapshot's rows/s (sluice start → every row in Doris); per rate: the generator's rows/s,
# the rows/s applied in Doris (the phase's rows by `ts`, sampled every 250 ms, between the samples
# that first saw its first and its last commit while the generator ran), when the last rows landed,
# the lag p50/p99 (per table: sample time - newest `ts` visible), Sluice's CPU; a decode-only floor,
# and Sluice applied ÷ decoded (capped by the generator's rate while Sluice keeps up); Sluice's peak
# RSS (VmHWM).
# The floor: a second logical slot (`floor_N`, pgoutput) created just before each phase and read,
# after the phase, as fast as the server can with `pg_logical_slot_get_binary_changes(…,
# 'proto_version', '1', 'publication_names', 'bench')` — PostgreSQL decoding the same phase's
# changes with the same plugin and publication Sluice streams, server-side, with no network, no
# parsing and no Doris; its rows are the INSERT / UPDATE / DELETE messages (rows/s = those ÷ the
# query's time). The slot is dropped afterwards.
# Then the catch-up: Sluice stopped (SIGTERM, at a checkpoint), CHANGES changes written as fast as one
# connection can (per table, transactions of 1,000 inserted and 1,000 updated rows), Sluice started
# again: the changes ÷ the time from its start until Doris holds them all, beside a decode-only floor
# of the same changes.
# Targets: >= 50 k rows/s streaming on 2 cores, lag p99 <= checkpoint interval + 1 s, RSS <= 200 MB,
# catch-up >= 200 k rows/s on 2 cores.
# Needs: cargo, PostgreSQL 15 server binaries in /usr/lib/postgresql/15/bin (run as the `postgres`
# user through runuser when this script runs as root), mysql (or mariadb) CLI, awk, python3 (psycopg
# and pymysql are installed into a virtualenv, $SLUICE_BENCH_VENV or /var/tmp/sluice-bench-venv).
set -euo pipefail

ROWS="${1:-1000000}"
SECS="${2:-20}"
CHANGES="${3:-2000000}"
RATES=(10000 50000)
TABLES=10
CKPT=1
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/common.sh"
bench_binaries
bench_venv "import psycopg, pymysql" "psycopg[binary]" pymysql
start_doris_lite

start_postgres

PER=$(( ROWS / TABLES ))
TOTAL=$(( PER * TABLES ))
echo "loading $TOTAL rows into PostgreSQL (port $PGPORT)…" >&2
for i in $(seq 0 $(( TABLES - 1 ))); do
  psql_ -c "CREATE TABLE public.t$i (id BIGINT PRIMARY KEY, k INT NOT NULL, name VARCHAR(32) NOT NULL,
              amount NUMERIC(12,2) NOT NULL, ts BIGINT NOT NULL DEFAULT 0)" \
        -c "INSERT INTO public.t$i SELECT g, g % 1000, 'customer_' || g, g % 100000 + 0.25, 0 FROM generate_series(1, $PER) g" \
        -c "ANALYZE public.t$i"
done
sql "CREATE DATABASE bench"

cat >"$WORK/pipeline.toml" <<TOML
[pipeline]
name = "postgres_sync"
parallelism = 2
checkpoint_interval = "${CKPT}s"
state_dir = "$WORK/state"

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
slot_name = "bench"
scan.startup.mode = "initial"

[[sink]]
type = "doris"
database = "bench"
table_properties.replication_num = "1"
TOML

cat >"$WORK/helper.py" <<'PY'
"""postgres_sync.sh's helper: snapshot N TIMEOUT | follow TIMEOUT | phase RATE SECS PER_TABLE N PID | floor create|read N
| burst CHANGES PER_TABLE N | landed ROWS STAMP TIMEOUT"""
import math, multiprocessing as mp, os, statistics, sys, time
import psycopg, pymysql

PGPORT, QPORT, T = int(os.environ["PGPORT"]), int(os.environ["QPORT"]), int(os.environ["TABLES"])
NAMES = ["t%d" % i for i in range(T)]
def pg(autocommit=True): return psycopg.connect(host="127.0.0.1", port=PGPORT, user="postgres", dbname="postgres", autocommit=autocommit)
def doris(): return pymysql.connect(host="127.0.0.1", port=QPORT, user="root", password="", autocommit=True)
def ask(conn, sql):
    with conn.cursor() as c:
        c.execute(sql); return c.fetchall()
def pct(v, p): s = sorted(v); return s[max(0, math.ceil(p / 100 * len(s)) - 1)]
def cpu(pid):  # user + system seconds of a process
    with open("/proc/%d/stat" % pid) as f: v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

def snapshot(total, timeout):
    d, t0, n = doris(), time.time(), 0
    while time.time() - t0 < timeout:
        try: n = sum(r[0] for r in ask(d, " UNION ALL ".join("SELECT count(*) FROM bench.%s" % t for t in NAMES)))
        except pymysql.MySQLError: n = 0
        if n >= total: return print("%.3f" % time.time())
        time.sleep(0.2)
    sys.exit("snapshot: %d of %d rows in Doris after %d s" % (n, total, timeout))

def follow(timeout):
    m, d, t0 = pg(), doris(), time.time()
    m.execute("INSERT INTO t0 VALUES (-1, 0, 'marker', 0, %d)" % (time.time_ns() // 1000))
    while time.time() - t0 < timeout:
        if ask(d, "SELECT count(*) FROM bench.t0 WHERE id = -1")[0][0]: return print("%.1f" % (time.time() - t0))
        time.sleep(0.2)
    sys.exit("the marker row did not reach Doris within %d s" % timeout)

def generator(rate, secs, per_table, phase, start, out):
    conn = pg(autocommit=False); cur = conn.cursor()
    ticks = int(secs * 10); each = max(1, round(rate / 10 / T))  # rows per table per 100 ms
    upd = min(each // 2, per_table // ticks)  # updated rows stay distinct within the phase
    ins, next_id, low, rows, k = each - upd, phase * 10**9, 1, 0, 0
    while k < ticks and time.time() < start + secs:
        time.sleep(max(0, start + k * 0.1 - time.time()))
        for t in NAMES:
            ts = time.time_ns() // 1000
            cur.execute("INSERT INTO %s VALUES %s" % (t, ",".join("(%d,%d,'customer_%d',%d.25,%d)" % (
                i, i % 1000, i, i % 100000, ts) for i in range(next_id, next_id + ins))))
            if upd: cur.execute("UPDATE %s SET amount = amount + 1, ts = %d WHERE id >= %d AND id < %d" % (t, ts, low, low + upd))
            conn.commit()
        next_id, low, rows, k = next_id + ins, low + upd, rows + each * T, k + 1
    out.put(dict(rows=rows, end=time.time()))

def phase(rate, secs, per_table, n, pid):
    q, start = mp.Queue(), time.time() + 0.5
    g = mp.Process(target=generator, args=(rate, secs, per_table, n, start, q)); g.start()
    d, since, cpu0 = doris(), int(start * 1e6), cpu(pid)
    sql = " UNION ALL ".join("SELECT %d, count(*), max(ts) FROM bench.%s WHERE ts >= %d" % (i, t, since) for i, t in enumerate(NAMES))
    samples, ask_secs, res, deadline = [], [], None, None  # samples: (time, rows visible, [lag per table])
    while True:
        asked = time.time(); vis = ask(d, sql); t = time.time(); ask_secs.append(t - asked)
        samples.append((t, sum(r[1] for r in vis), [t - (r[2] / 1e6 if r[2] else start) for r in vis]))
        if res is None and not q.empty(): res = q.get()
        if res is not None:
            if samples[-1][1] >= res["rows"]: break
            deadline = deadline or time.time() + 120
            if time.time() > deadline: break
        if g.exitcode not in (None, 0): sys.exit("the load generator failed")
        time.sleep(max(0, 0.25 - (time.time() - asked)))
    cpu_secs, wall, end = cpu(pid) - cpu0, samples[-1][0] - start, res["end"]
    # Rows per second between the first commit of the phase's rows and the last one while the
    # generator ran (the samples that first saw them; both cut at a checkpoint, so alike in delay):
    # the generator's rate if Sluice keeps up, else what it achieves.
    ran = [s for s in samples if s[0] <= end]
    a = next(s for s in samples if s[1] > 0); b = next(s for s in ran if s[1] == ran[-1][1])
    applied = (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else 0
    lags, gen = [l for s in samples if start <= s[0] <= end for l in s[2]], res["rows"] / (end - start)
    last = samples[-1]; drain = last[0] - end if last[1] >= res["rows"] else -1
    landed = ("all %d rows in Doris %.1f s after it stopped" % (res["rows"], drain) if drain >= 0
              else "%d of %d rows in Doris 120 s after it stopped" % (last[1], res["rows"]))
    print("%d rows/s for %g s: generator %.0f rows/s; applied in Doris %.0f rows/s (%s); lag p50 %.2f s p99 %.2f s "
          "max %.2f s; sluice CPU %.2f cores; poll p50 %.3f s" % (rate, secs, gen, applied, landed, pct(lags, 50),
          pct(lags, 99), max(lags), cpu_secs / wall, statistics.median(ask_secs)))
    with open(os.environ["OUT"], "w") as f:
        f.write("GEN=%.0f APPLIED=%.0f DRAIN=%.2f P99=%.3f CPU=%.2f\n" % (gen, applied, drain, pct(lags, 99), cpu_secs / wall))

def burst(changes, per_table, n):
    # As fast as one connection writes them: per table, transactions of 1,000 inserted rows and (while
    # the table has rows not yet touched) 1,000 updated ones, every row stamped ts = the burst's start.
    conn = pg(autocommit=False); cur = conn.cursor()
    stamp, next_id, low, rows = time.time_ns() // 1000, n * 10**9, 1, 0
    while rows < changes:
        upd = max(0, min(1000, per_table + 1 - low))
        for t in NAMES:
            cur.execute("INSERT INTO %s VALUES %s" % (t, ",".join("(%d,%d,'customer_%d',%d.25,%d)" % (
                i, i % 1000, i, i % 100000, stamp) for i in range(next_id, next_id + 1000))))
            if upd: cur.execute("UPDATE %s SET amount = amount + 1, ts = %d WHERE id >= %d AND id < %d" % (t, stamp, low, low + upd))
            conn.commit()
        next_id, low, rows = next_id + 1000, low + upd, rows + (1000 + upd) * T
    print("%d %d" % (rows, stamp))

def landed(total, stamp, timeout):  # prints the time Doris first holds `total` rows stamped >= stamp
    d, t0, n = doris(), time.time(), 0
    sql = " UNION ALL ".join("SELECT count(*) FROM bench.%s WHERE ts >= %d" % (t, stamp) for t in NAMES)
    while time.time() - t0 < timeout:
        try: n = sum(r[0] for r in ask(d, sql))
        except pymysql.MySQLError: n = 0
        if n >= total: return print("%.3f" % time.time())
        time.sleep(0.25)
    sys.exit("catch-up: %d of %d rows in Doris after %d s" % (n, total, timeout))

def floor(action, n):
    m, slot = pg(), "floor_%s" % n
    if action == "create":
        return m.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    # Row messages: 'I'nsert, 'U'pdate, 'D'elete (the rest: Begin, Commit, Relation, ...).
    t0 = time.time()
    rows, msgs = m.execute("SELECT count(*) FILTER (WHERE get_byte(data, 0) IN (73, 85, 68)), count(*) "
                           "FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                           "'publication_names', 'bench')", (slot,)).fetchone()
    secs = time.time() - t0
    m.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    print("%d %d %.3f" % (rows, msgs, secs))

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"snapshot": lambda: snapshot(int(args[0]), int(args[1])), "follow": lambda: follow(int(args[0])),
     "phase": lambda: phase(*map(int, args)), "floor": lambda: floor(*args),
     "burst": lambda: burst(*map(int, args)), "landed": lambda: landed(*map(int, args))}[cmd]()
PY
helper() { PGPORT="$PGPORT" QPORT="$QPORT" TABLES="$TABLES" TMPDIR="$WORK" "$PY" "$WORK/helper.py" "$@"; }
sluice_failed() {
  echo "--- sluice log (errors, tail) ---" >&2
  grep -E 'ERROR|WARN|error' "$WORK/sluice.err" | tail -20 >&2 || tail -20 "$WORK/sluice.err" >&2
  exit 1
}

echo "sluice run: snapshot of $TOTAL rows…" >&2
t0=$(now)
SLUICE_LOG=info "$SLUICE" run "$WORK/pipeline.toml" 2>"$WORK/sluice.err" &
SLUICE_PID=$!
track "$SLUICE_PID"
t1=$(helper snapshot "$TOTAL" 900) || sluice_failed
SNAP_SECS=$(calc "$t1 - $t0")
SNAP_RSS=$(awk '/^VmHWM/{print int($2 / 1024)}' "/proc/$SLUICE_PID/status")
SNAP_CPU=$(calc "$(awk '{print $14 + $15}' "/proc/$SLUICE_PID/stat") / $(getconf CLK_TCK) / $SNAP_SECS")
FOLLOW=$(helper follow 120) || sluice_failed

PGVERSION="$("$PGBIN/postgres" --version | sed 's/^postgres (PostgreSQL) /PostgreSQL /')"
printf 'machine: %s cores; %s (wal_level logical, pgoutput) → doris-lite; %d tables, %d rows; parallelism 2, checkpoint %d s\n' \
  "$(nproc)" "$PGVERSION" "$TABLES" "$TOTAL" "$CKPT"
printf 'snapshot: %d rows in %.1f s = %.0f rows/s (sluice start → every row in Doris); sluice CPU %.2f cores, peak RSS %d MB; a marker row through the slot %s s later\n' \
  "$TOTAL" "$SNAP_SECS" "$(calc "$TOTAL / $SNAP_SECS")" "$SNAP_CPU" "$SNAP_RSS" "$FOLLOW"
n=0; SUMMARY=(); P99S=()
for rate in "${RATES[@]}"; do
  n=$(( n + 1 ))
  helper floor create "$n" || { echo "could not create the replication slot floor_$n" >&2; exit 1; }
  echo "streaming at $rate rows/s for $SECS s…" >&2
  OUT="$WORK/phase$n.env" helper phase "$rate" "$SECS" "$PER" "$n" "$SLUICE_PID" || sluice_failed
  source "$WORK/phase$n.env" && P99S+=("$P99")
  read -r D_ROWS D_MSGS D_SECS <<<"$(helper floor read "$n")"
  D_RATE=$(calc "$D_ROWS / $D_SECS")
  printf '  pgoutput decoding the same changes server-side (slot floor_%d, pg_logical_slot_get_binary_changes): %d rows (%d messages) in %.2f s = %.0f rows/s decoded; sluice applied / decoded: %.2f\n' \
    "$n" "$D_ROWS" "$D_MSGS" "$D_SECS" "$D_RATE" "$(calc "$APPLIED / $D_RATE")"
  SUMMARY+=("$(printf '%6d rows/s: generator %6.0f, sluice applied %6.0f, decode-only %6.0f rows/s, ratio %.2f; lag p99 %.2f s; sluice CPU %.2f cores' \
    "$rate" "$GEN" "$APPLIED" "$D_RATE" "$(calc "$APPLIED / $D_RATE")" "$P99" "$CPU")")
done
RSS=$(awk '/^VmHWM/{print int($2 / 1024)}' "/proc/$SLUICE_PID/status")
stop_sluice

# Catch-up: changes written while Sluice is stopped, then Sluice started again from its checkpoint.
helper floor create c || { echo "could not create the replication slot floor_c" >&2; exit 1; }
echo "catch-up: writing $CHANGES changes while sluice is stopped…" >&2
read -r C_ROWS C_STAMP <<<"$(helper burst "$CHANGES" "$PER" 9)"
catch_up "$C_ROWS" "$C_STAMP"
read -r CD_ROWS _ CD_SECS <<<"$(helper floor read c)"
FLOOR_WHAT="pgoutput decoding the same changes server-side (slot floor_c)"
catch_up_report "$FLOOR_WHAT" "$CD_ROWS" "$CD_SECS"
echo "$CATCHUP"
grep -E '^(stopped|finished) at checkpoint' "$WORK/sluice.err" || true
grep -E ' (ERROR|WARN) ' "$WORK/sluice.err" | head -5 | sed 's/^/sluice logged: /' || true

echo "--- summary ($(nproc) cores, $PGVERSION, $TOTAL rows, $SECS s per rate) ---"
printf 'snapshot: %.0f rows/s\n' "$(calc "$TOTAL / $SNAP_SECS")"
printf '%s\n' "${SUMMARY[@]}"
printf 'sluice peak RSS (VmHWM): %d MB\n' "$RSS"
echo "$CATCHUP"
met() { awk "BEGIN { print ($1) ? \"met\" : \"not met\" }"; }
# Keeping up with the generator at 50 k (its last rows in Doris within a checkpoint + 1 s) meets it too.
if [ "$(met "$APPLIED >= 50000")" = met ]; then KEPT="$APPLIED rows/s applied at 50 k"
elif [ "$(met "$GEN >= 49000 && $DRAIN >= 0 && $DRAIN <= $CKPT + 1")" = met ]; then
  KEPT="$APPLIED rows/s measured; sluice kept up with the generator's $GEN rows/s: its last rows in Doris $DRAIN s after it stopped"
else KEPT=""; fi
printf 'target: streaming >= 50000 rows/s on 2 cores: %s (%s)\n' "$([ -n "$KEPT" ] && echo met || echo not met)" \
  "${KEPT:-$APPLIED rows/s applied at 50 k, the generator wrote $GEN rows/s, last rows in Doris after $DRAIN s (-1: not all)}"
printf 'target: lag p99 <= checkpoint interval + 1 s = %d s: %s at 10 k (p99 %.2f s), %s at 50 k (p99 %.2f s)\n' $(( CKPT + 1 )) \
  "$(met "${P99S[0]} <= $CKPT + 1")" "${P99S[0]}" "$(met "$P99 <= $CKPT + 1")" "$P99"
printf 'target: peak RSS <= 200 MB: %s (%d MB)\n' "$(met "$RSS <= 200")" "$RSS"
printf 'target: catch-up >= 200000 rows/s on 2 cores: %s (%.0f rows/s)\n' "$(met "$C_RATE >= 200000")" "$C_RATE"
printf 'load average (1, 5, 15 min) at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
