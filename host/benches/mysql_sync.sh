#!/usr/bin/env bash
# MySQL/MariaDB → Doris whole-database sync: a MariaDB of this script (own temp dir, free loopback
# port, binlog ROW, 1 GB buffer pool, innodb_flush_log_at_trx_commit = 2) with 10 tables of ROWS rows
# in all; `sluice run` of a `type = "mysql"` source (`scan.startup.mode = "initial"`, parallelism 2,
# checkpoint 1 s) into doris-lite's `bench` database, tables created by the sink. Once a marker row
# shows it follows the binlog, a load generator writes 10 k, then 50 k rows/s for SECONDS each: every
# 100 ms, per table, one transaction of a multi-row INSERT and a ranged UPDATE (about half each), each
# row stamped `ts` = the wall-clock µs of its write. Release builds.
#
#   host/benches/mysql_sync.sh [ROWS] [SECONDS] [CHANGES]       # default 1,000,000 rows, 20 s per rate, 2,000,000 changes
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/mysql_sync.sh    # skip the build
#
# Prints the snapshot's rows/s (sluice start → every row in Doris); per rate: the generator's rows/s,
# the rows/s applied in Doris (the phase's rows by `ts`, sampled every 250 ms, between the samples
# that first saw its first and its last commit while the generator ran), when the last rows landed,
# the lag p50/p99 (per table: sample time - newest `ts` visible), Sluice's CPU; python-mysql-replication
# decoding the same phase's binlog events alone, as fast as it can (a decode-only floor), and Sluice
# applied ÷ decoded (capped by the generator's rate while Sluice keeps up); Sluice's peak RSS (VmHWM).
# Then the catch-up: Sluice stopped (SIGTERM, at a checkpoint), CHANGES changes written as fast as one
# connection can (per table, transactions of 1,000 inserted and 1,000 updated rows), Sluice started
# again: the changes ÷ the time from its start until Doris holds them all, beside a decode-only floor
# of the same changes.
# Targets: >= 50 k rows/s streaming on 2 cores, lag p99 <= checkpoint interval + 1 s, RSS <= 200 MB,
# catch-up >= 200 k rows/s on 2 cores.
# Needs: cargo, mariadb-install-db and mariadbd, mysql (or mariadb) CLI, awk, python3 (pymysql and
# mysql-replication are installed into a virtualenv, $SLUICE_BENCH_VENV or /var/tmp/sluice-bench-venv).
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
bench_venv "import pymysql, pymysqlreplication" pymysql mysql-replication
start_doris_lite

start_mariadb

PER=$(( ROWS / TABLES ))
TOTAL=$(( PER * TABLES ))
echo "loading $TOTAL rows into MariaDB (port $MPORT)…" >&2
msql "CREATE DATABASE app"
for i in $(seq 0 $(( TABLES - 1 ))); do
  msql "USE app; CREATE TABLE t$i (id BIGINT PRIMARY KEY, k INT NOT NULL, name VARCHAR(32) NOT NULL,
          amount DECIMAL(12,2) NOT NULL, ts BIGINT NOT NULL DEFAULT 0);
        INSERT INTO t$i SELECT seq, seq % 1000, CONCAT('customer_', seq), seq % 100000 + 0.25, 0 FROM seq_1_to_$PER"
done
sql "CREATE DATABASE bench"

cat >"$WORK/pipeline.toml" <<TOML
[pipeline]
name = "mysql_sync"
parallelism = 2
checkpoint_interval = "${CKPT}s"
state_dir = "$WORK/state"

[connections.src]
type = "mysql"
host = "127.0.0.1"
port = $MPORT
user = "root"
server_id = 7101

[doris]
fenodes = ["$FE"]

[[source]]
type = "mysql"
connection = "src"
database = "app"
scan.startup.mode = "initial"

[[sink]]
type = "doris"
database = "bench"
table_properties.replication_num = "1"
TOML

cat >"$WORK/helper.py" <<'PY'
"""mysql_sync.sh's helper: snapshot N TIMEOUT | follow TIMEOUT | phase RATE SECS PER_TABLE N PID | decode F0 P0 F1 P1
| burst CHANGES PER_TABLE N | landed ROWS STAMP TIMEOUT"""
import logging, math, multiprocessing as mp, os, statistics, sys, time
import pymysql

MPORT, QPORT, T = int(os.environ["MPORT"]), int(os.environ["QPORT"]), int(os.environ["TABLES"])
NAMES = ["t%d" % i for i in range(T)]
def connect(port, **kw): return pymysql.connect(host="127.0.0.1", port=port, user="root", password="", **kw)
def ask(conn, sql):
    with conn.cursor() as c:
        c.execute(sql); return c.fetchall()
def pct(v, p): s = sorted(v); return s[max(0, math.ceil(p / 100 * len(s)) - 1)]
def cpu(pid):  # user + system seconds of a process
    with open("/proc/%d/stat" % pid) as f: v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

def snapshot(total, timeout):
    d, t0, n = connect(QPORT, autocommit=True), time.time(), 0
    while time.time() - t0 < timeout:
        try: n = sum(r[0] for r in ask(d, " UNION ALL ".join("SELECT count(*) FROM bench.%s" % t for t in NAMES)))
        except pymysql.MySQLError: n = 0
        if n >= total: return print("%.3f" % time.time())
        time.sleep(0.2)
    sys.exit("snapshot: %d of %d rows in Doris after %d s" % (n, total, timeout))

def follow(timeout):
    m, d, t0 = connect(MPORT, database="app", autocommit=True), connect(QPORT, autocommit=True), time.time()
    ask(m, "INSERT INTO t0 VALUES (-1, 0, 'marker', 0, %d)" % (time.time_ns() // 1000))
    while time.time() - t0 < timeout:
        if ask(d, "SELECT count(*) FROM bench.t0 WHERE id = -1")[0][0]: return print("%.1f" % (time.time() - t0))
        time.sleep(0.2)
    sys.exit("the marker row did not reach Doris within %d s" % timeout)

def generator(rate, secs, per_table, phase, start, out):
    conn = connect(MPORT, database="app", autocommit=False); cur = conn.cursor()
    ticks = int(secs * 10); each = max(1, round(rate / 10 / T))  # rows per table per 100 ms
    upd = min(each // 2, per_table // ticks)  # updated rows stay distinct within the phase
    ins, next_id, low, rows, k = each - upd, phase * 10**9, 1, 0, 0
    cur.execute("SHOW MASTER STATUS"); f0, p0 = cur.fetchone()[:2]
    while k < ticks and time.time() < start + secs:
        time.sleep(max(0, start + k * 0.1 - time.time()))
        for t in NAMES:
            ts = time.time_ns() // 1000
            cur.execute("INSERT INTO %s VALUES %s" % (t, ",".join("(%d,%d,'customer_%d',%d.25,%d)" % (
                i, i % 1000, i, i % 100000, ts) for i in range(next_id, next_id + ins))))
            if upd: cur.execute("UPDATE %s SET amount = amount + 1, ts = %d WHERE id >= %d AND id < %d" % (t, ts, low, low + upd))
            conn.commit()
        next_id, low, rows, k = next_id + ins, low + upd, rows + each * T, k + 1
    end = time.time()
    cur.execute("SHOW MASTER STATUS"); f1, p1 = cur.fetchone()[:2]
    out.put(dict(rows=rows, end=end, f0=f0, p0=p0, f1=f1, p1=p1))

def phase(rate, secs, per_table, n, pid):
    q, start = mp.Queue(), time.time() + 0.5
    g = mp.Process(target=generator, args=(rate, secs, per_table, n, start, q)); g.start()
    d, since, cpu0 = connect(QPORT, autocommit=True), int(start * 1e6), cpu(pid)
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
        f.write("GEN=%.0f APPLIED=%.0f DRAIN=%.2f P99=%.3f CPU=%.2f F0=%s P0=%s F1=%s P1=%s\n" % (gen, applied, drain,
                pct(lags, 99), cpu_secs / wall, res["f0"], res["p0"], res["f1"], res["p1"]))

def burst(changes, per_table, n):
    # As fast as one connection writes them: per table, transactions of 1,000 inserted rows and (while
    # the table has rows not yet touched) 1,000 updated ones, every row stamped ts = the burst's start.
    conn = connect(MPORT, database="app", autocommit=False); cur = conn.cursor()
    cur.execute("SHOW MASTER STATUS"); f0, p0 = cur.fetchone()[:2]
    stamp, next_id, low, rows = time.time_ns() // 1000, n * 10**9, 1, 0
    while rows < changes:
        upd = max(0, min(1000, per_table + 1 - low))
        for t in NAMES:
            cur.execute("INSERT INTO %s VALUES %s" % (t, ",".join("(%d,%d,'customer_%d',%d.25,%d)" % (
                i, i % 1000, i, i % 100000, stamp) for i in range(next_id, next_id + 1000))))
            if upd: cur.execute("UPDATE %s SET amount = amount + 1, ts = %d WHERE id >= %d AND id < %d" % (t, stamp, low, low + upd))
            conn.commit()
        next_id, low, rows = next_id + 1000, low + upd, rows + (1000 + upd) * T
    cur.execute("SHOW MASTER STATUS"); f1, p1 = cur.fetchone()[:2]
    print("%d %d %s %s %s %s" % (rows, stamp, f0, p0, f1, p1))

def landed(total, stamp, timeout):  # prints the time Doris first holds `total` rows stamped >= stamp
    d, t0, n = connect(QPORT, autocommit=True), time.time(), 0
    sql = " UNION ALL ".join("SELECT count(*) FROM bench.%s WHERE ts >= %d" % (t, stamp) for t in NAMES)
    while time.time() - t0 < timeout:
        try: n = sum(r[0] for r in ask(d, sql))
        except pymysql.MySQLError: n = 0
        if n >= total: return print("%.3f" % time.time())
        time.sleep(0.25)
    sys.exit("catch-up: %d of %d rows in Doris after %d s" % (n, total, timeout))

def decode(f0, p0, f1, p1):
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
    logging.getLogger("pymysqlreplication").setLevel(logging.ERROR)  # (binlog_row_metadata: names unused)
    t0, rows = time.time(), 0
    s = BinLogStreamReader(connection_settings=dict(host="127.0.0.1", port=MPORT, user="root", password=""),
                           server_id=7201, log_file=f0, log_pos=int(p0), resume_stream=True, blocking=False,
                           only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=["app"],
                           enable_logging=False)
    for ev in s:
        rows += len(ev.rows)
        if (s.log_file, s.log_pos) >= (f1, int(p1)): break
    s.close(); print("%d %.3f" % (rows, time.time() - t0))

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"snapshot": lambda: snapshot(int(args[0]), int(args[1])), "follow": lambda: follow(int(args[0])),
     "phase": lambda: phase(*map(int, args)), "decode": lambda: decode(*args),
     "burst": lambda: burst(*map(int, args)), "landed": lambda: landed(*map(int, args))}[cmd]()
PY
helper() { MPORT="$MPORT" QPORT="$QPORT" TABLES="$TABLES" TMPDIR="$WORK" "$PY" "$WORK/helper.py" "$@"; }
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

printf 'machine: %s cores; %s (binlog ROW) → doris-lite; %d tables, %d rows; parallelism 2, checkpoint %d s\n' \
  "$(nproc)" "$(mariadbd --version | awk '{print $3}')" "$TABLES" "$TOTAL" "$CKPT"
printf 'snapshot: %d rows in %.1f s = %.0f rows/s (sluice start → every row in Doris); sluice CPU %.2f cores, peak RSS %d MB; a marker row through the binlog %s s later\n' \
  "$TOTAL" "$SNAP_SECS" "$(calc "$TOTAL / $SNAP_SECS")" "$SNAP_CPU" "$SNAP_RSS" "$FOLLOW"
n=0; SUMMARY=(); P99S=()
for rate in "${RATES[@]}"; do
  n=$(( n + 1 ))
  echo "streaming at $rate rows/s for $SECS s…" >&2
  OUT="$WORK/phase$n.env" helper phase "$rate" "$SECS" "$PER" "$n" "$SLUICE_PID" || sluice_failed
  source "$WORK/phase$n.env" && P99S+=("$P99")
  DECODED=$(helper decode "$F0" "$P0" "$F1" "$P1")
  read -r D_ROWS D_SECS <<<"$DECODED"
  D_RATE=$(calc "$D_ROWS / $D_SECS")
  printf '  python-mysql-replication, the same binlog events alone: %d rows in %.2f s = %.0f rows/s decoded; sluice applied / decoded: %.2f\n' \
    "$D_ROWS" "$D_SECS" "$D_RATE" "$(calc "$APPLIED / $D_RATE")"
  SUMMARY+=("$(printf '%6d rows/s: generator %6.0f, sluice applied %6.0f, decode-only %6.0f rows/s, ratio %.2f; lag p99 %.2f s; sluice CPU %.2f cores' \
    "$rate" "$GEN" "$APPLIED" "$D_RATE" "$(calc "$APPLIED / $D_RATE")" "$P99" "$CPU")")
done
RSS=$(awk '/^VmHWM/{print int($2 / 1024)}' "/proc/$SLUICE_PID/status")
stop_sluice

# Catch-up: changes written while Sluice is stopped, then Sluice started again from its checkpoint.
echo "catch-up: writing $CHANGES changes while sluice is stopped…" >&2
read -r C_ROWS C_STAMP CF0 CP0 CF1 CP1 <<<"$(helper burst "$CHANGES" "$PER" 9)"
catch_up "$C_ROWS" "$C_STAMP"
read -r CD_ROWS CD_SECS <<<"$(helper decode "$CF0" "$CP0" "$CF1" "$CP1")"
FLOOR_WHAT="python-mysql-replication decoding the same binlog events alone"
catch_up_report "$FLOOR_WHAT" "$CD_ROWS" "$CD_SECS"
echo "$CATCHUP"
grep -E '^(stopped|finished) at checkpoint' "$WORK/sluice.err" || true
grep -E ' (ERROR|WARN) ' "$WORK/sluice.err" | head -5 | sed 's/^/sluice logged: /' || true

echo "--- summary ($(nproc) cores, $TOTAL rows, $SECS s per rate) ---"
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
