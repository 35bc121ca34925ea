#!/usr/bin/env bash
# Snapshot-scan throughput of the `doris` source: `sluice run` of a `type = "doris"` snapshot source
# into a `blackhole` sink, side by side with pyarrow reading the same `TABLET(...)` splits over
# Arrow Flight SQL with as many concurrent streams, against one release doris-lite, in the same run.
#
#   host/benches/doris_scan.sh [ROWS] [PARALLELISMS] [REPEAT]   # default 5,000,000 rows, "1 2 4", 5
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/doris_scan.sh    # use these binaries, skip the build
#
# The table has 6 columns (BIGINT, INT, DECIMAL(12,2), VARCHAR(32), DATE, DATETIME) in 8 tablets
# (BUCKETS 8) and is loaded with one Stream Load (curl). `request.tablet.size` (TABLET_SIZE, default
# 2) makes 4 splits, so every parallelism up to 4 has a split per worker, and both clients do the
# same work: `_query_plan` for the tablet ids, one Flight SQL query per split (worker w of n reads
# splits w, w + n, …), every batch read to the end.
#
# Timing, two ways on equal footing: in-process — Sluice's own figure on its "finished …" line
# (from before it connects to Doris to the final checkpoint: `_query_plan`, connecting, the scan)
# against pyarrow timed inside its script (from the `_query_plan` request to the last stream's
# end; interpreter start-up and imports excluded); and process — the wall time of each whole
# process. Sluice's fixed cost (the same pipeline over an empty table) is printed as well.
# Each figure is the median (and the best) of REPEAT runs, the runs of the two clients alternating;
# cpu is the median user + system seconds of the process.
#
# Needs: cargo, curl, mysql (or mariadb) CLI, awk, GNU time, python3 (pyarrow is installed into a virtualenv,
# $SLUICE_BENCH_VENV or /var/tmp/sluice-bench-venv, when missing).
set -euo pipefail

ROWS="${1:-5000000}"
PARS="${2:-1 2 4}"
REPEAT="${3:-5}"
TABLET_SIZE="${TABLET_SIZE:-2}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/common.sh"
bench_binaries
bench_venv "import pyarrow.flight" pyarrow
start_doris_lite

sql "CREATE DATABASE bench"
for t in scan empty; do
  sql "CREATE TABLE bench.$t (id BIGINT, k INT, amount DECIMAL(12,2), name VARCHAR(32), day DATE, ts DATETIME) \
       DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8"
done
echo "generating and loading $ROWS rows…" >&2
awk -v n="$ROWS" 'BEGIN {
  for (i = 0; i < n; i++)
    printf "%d,%d,%d.%02d,customer_%08d,2024-%02d-%02d,2024-%02d-%02d %02d:%02d:%02d\n",
      i, i % 100000, i % 1000000, i % 100, i, i % 12 + 1, i % 28 + 1, i % 12 + 1, i % 28 + 1, i % 24, i % 60, (i * 7) % 60
}' >"$WORK/data.csv"
STATUS=$(curl -sS --location-trusted -u root: -H "label:scan1" -H "column_separator:," \
  -T "$WORK/data.csv" "http://$FE/api/bench/scan/_stream_load" | awk -F'"' '/"Status"/{print $4}')
[ "$STATUS" = "Success" ] || { echo "load failed: $STATUS" >&2; exit 1; }
rm -f "$WORK/data.csv"
LOADED=$(sql "SELECT count(*) FROM bench.scan")
TABLETS=$(sql "SHOW TABLETS FROM bench.scan" | wc -l)

cat >"$WORK/pyscan.py" <<'PY'
"""pyarrow's side: `_query_plan`, splits of TABLET_SIZE tablets, N threads each reading splits
w, w + N, … over Flight SQL, every batch to the end. Prints `rows seconds` (timed from the
`_query_plan` request to the last stream's end)."""
import base64, json, os, sys, threading, time, urllib.request
import pyarrow.flight as fl

fe, fport, db, table, tablet_size, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])

sys.path.insert(0, os.environ["FLIGHT_SCAN_DIR"])
from flight_scan import command  # the Flight SQL CommandStatementQuery encoder

t0 = time.perf_counter()
select = "SELECT * FROM `%s`.`%s`" % (db, table)
req = urllib.request.Request("http://%s/api/%s/%s/_query_plan" % (fe, db, table),
                             data=json.dumps({"sql": select}).encode(), method="POST",
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Basic " + base64.b64encode(b"root:").decode()})
plan = json.load(urllib.request.urlopen(req))["data"]
tablets = sorted(int(t) for t in plan["partitions"])
splits = [tablets[i:i + tablet_size] for i in range(0, len(tablets), tablet_size)]
counts = [0] * n
errors = []

def worker(w):
    try:
        c = fl.FlightClient("grpc://127.0.0.1:%s" % fport)
        o = fl.FlightCallOptions(headers=[c.authenticate_basic_token("root", "")])
        for s in splits[w::n]:
            sql = "/* ApplicationName=pyarrow ArrowFlightSQL Query */ SELECT * FROM `%s`.`%s` TABLET(%s)" % (
                db, table, ",".join(map(str, s)))
            info = c.get_flight_info(fl.FlightDescriptor.for_command(command(sql)), o)
            for ep in info.endpoints:
                for chunk in c.do_get(ep.ticket, o):
                    counts[w] += chunk.data.num_rows
        c.close()
    except Exception as e:  # reported below
        errors.append(repr(e))

threads = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
secs = time.perf_counter() - t0
if errors:
    sys.exit("pyarrow scan failed: %s" % errors[0])
print(sum(counts), secs)
PY
export FLIGHT_SCAN_DIR="$REPO/doris-lite/benches"

# Warm-up: the first scan of a table makes doris-lite build its per-tablet Arrow snapshot.
"$PY" "$WORK/pyscan.py" "$FE" "$FPORT" bench scan "$TABLET_SIZE" 1 >/dev/null

printf 'data: %d rows (loaded: %d), 6 columns (BIGINT, INT, DECIMAL(12,2), VARCHAR(32), DATE, DATETIME), %d tablets, request.tablet.size = %d (%d splits)\n' \
  "$ROWS" "$LOADED" "$TABLETS" "$TABLET_SIZE" $(( (TABLETS + TABLET_SIZE - 1) / TABLET_SIZE ))
printf 'machine: %s cores (%s), median and best of %d runs\n' "$(nproc)" "$(uname -m)" "$REPEAT"
pipeline() { # NAME PARALLELISM TABLE
  cat >"$WORK/$1.toml" <<TOML
[pipeline]
name = "$1"
parallelism = $2
checkpoint_interval = "10s"
state_dir = "$WORK/state/$1"

[doris]
fenodes = ["$FE"]

[[source]]
type = "doris"
table = "bench.$3"
request.tablet.size = $TABLET_SIZE

[[sink]]
type = "blackhole"
TOML
}
cpu() { awk '{ print $1 + $2 }' "$1"; } # user + system seconds from GNU time's "%U %S"
printf '%-12s %-34s %9s %9s %12s %8s  %s\n' parallelism client median best rows/s cpu rows
for N in $PARS; do
  for f in s si p pw e sc pc; do : >"$WORK/$f"; done
  for r in $(seq 1 "$REPEAT"); do
    # Sluice's fixed cost: the same pipeline over an empty table of the same shape.
    pipeline "empty-$N-$r" "$N" empty
    t0=$(now)
    SLUICE_LOG=warn "$SLUICE" run "$WORK/empty-$N-$r.toml" 2>"$WORK/sluice-empty-$N-$r.err"
    t1=$(now)
    calc "$t1 - $t0" >>"$WORK/e"

    pipeline "p$N-$r" "$N" scan
    t0=$(now)
    SLUICE_LOG=warn /usr/bin/time -f '%U %S' -o "$WORK/time" "$SLUICE" run "$WORK/p$N-$r.toml" 2>"$WORK/sluice-$N-$r.err"
    t1=$(now)
    calc "$t1 - $t0" >>"$WORK/s"
    cpu "$WORK/time" >>"$WORK/sc"
    S_ROWS=$(sed -n 's/^finished at checkpoint [0-9]*: \([0-9]*\) rows read.*/\1/p' "$WORK/sluice-$N-$r.err")
    [ "$S_ROWS" = "$LOADED" ] || { echo "sluice read ${S_ROWS:-?} rows, expected $LOADED:" >&2; cat "$WORK/sluice-$N-$r.err" >&2; exit 1; }
    sed -n 's/^finished at checkpoint .* in \([0-9.]*\) s$/\1/p' "$WORK/sluice-$N-$r.err" >>"$WORK/si"

    t0=$(now)
    /usr/bin/time -f '%U %S' -o "$WORK/time" "$PY" "$WORK/pyscan.py" "$FE" "$FPORT" bench scan "$TABLET_SIZE" "$N" >"$WORK/py.out"
    t1=$(now)
    read -r P_ROWS P_SECS <"$WORK/py.out"
    echo "$P_SECS" >>"$WORK/p"
    calc "$t1 - $t0" >>"$WORK/pw"
    cpu "$WORK/time" >>"$WORK/pc"
    [ "$P_ROWS" = "$LOADED" ] || { echo "pyarrow read $P_ROWS rows, expected $LOADED" >&2; exit 1; }
  done
  S=$(median <"$WORK/s"); P=$(median <"$WORK/p"); PW=$(median <"$WORK/pw"); E=$(median <"$WORK/e")
  SB=$(best <"$WORK/s"); PB=$(best <"$WORK/p"); PWB=$(best <"$WORK/pw"); EB=$(best <"$WORK/e")
  SI=$(median <"$WORK/si"); SIB=$(best <"$WORK/si")
  SC=$(median <"$WORK/sc"); PC=$(median <"$WORK/pc")
  printf '%-12s %-34s %9.3f %9.3f %12.0f %8s  %s\n' "$N" "sluice run -> blackhole (in-process)" "$SI" "$SIB" "$(calc "$S_ROWS / $SI")" "" "$S_ROWS"
  printf '%-12s %-34s %9.3f %9.3f %12.0f %8.2f  %s\n' "$N" "sluice run -> blackhole (process)" "$S" "$SB" "$(calc "$S_ROWS / $S")" "$SC" "$S_ROWS"
  printf '%-12s %-34s %9.3f %9.3f %12.0f %8s  %s\n' "$N" "pyarrow, $N threads (in-script)" "$P" "$PB" "$(calc "$P_ROWS / $P")" "" "$P_ROWS"
  printf '%-12s %-34s %9.3f %9.3f %12.0f %8.2f  %s\n' "$N" "pyarrow, $N threads (process)" "$PW" "$PWB" "$(calc "$P_ROWS / $PW")" "$PC" "$P_ROWS"
  printf '%-12s %-34s %9.3f %9.3f\n' "$N" "sluice run, empty table (process)" "$E" "$EB"
  printf '%-12s sluice / pyarrow (median, best): %.2f, %.2f in-process (target >= 0.9); %.2f, %.2f process against process; %.2f, %.2f sluice process against pyarrow in-script\n' \
    "$N" "$(calc "$P / $SI")" "$(calc "$PB / $SIB")" "$(calc "$PW / $S")" "$(calc "$PWB / $SB")" "$(calc "$P / $S")" "$(calc "$PB / $SB")"
done
printf 'doris-lite RSS after the scans: %d MB\n' $(( $(awk '/VmRSS/{print $2}' "/proc/$DORIS_PID/status") / 1024 ))
