"""The load generator and lag meter of changelog_lag.sh.

    python changelog_lag.py FE QUERY_PORT SECONDS ROWS_PER_LOAD LOADS_PER_SECOND

Writes `bench.src` with one Stream Load (curl) of ROWS_PER_LOAD rows every 1/LOADS_PER_SECOND s
for SECONDS s (load k carries ids k*ROWS_PER_LOAD…, `b` = k and `sent_ms`, the wall-clock time
the load was sent), recording when each load's commit returned. A poller asks `bench.dst` every
100 ms which loads are there in full (`count(*) = ROWS_PER_LOAD`) and stamps each load visible at
the END of the first query that saw it in full: the time its result came back, not the time it was
asked. The rows were visible by then at the latest, whereas the ask time may come before they were
committed to the target; so the lag is never under-stated, and a slow poll query adds to it.
Lag = that time - the commit's return. Prints p50, p99 and max.

Before measuring, one probe row is loaded until it shows up in `bench.dst`: the pipeline is
following the changelog.
"""

import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import pymysql

fe, qport = sys.argv[1], int(sys.argv[2])
seconds, per_load, per_sec = float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])


BODY = os.path.join(tempfile.mkdtemp(), "load.csv")


def stream_load(label, body):
    with open(BODY, "wb") as f:
        f.write(body)
    out = subprocess.run(
        ["curl", "-sS", "--location-trusted", "-u", "root:", "-H", "label:" + label, "-H", "column_separator:,",
         "-T", BODY, "http://%s/api/bench/src/_stream_load" % fe],
        capture_output=True, check=True).stdout.decode()
    if '"Status": "Success"' not in out and '"Status":"Success"' not in out:
        raise SystemExit("stream load %s failed: %s" % (label, out))


def connect():
    return pymysql.connect(host="127.0.0.1", port=qport, user="root", password="", autocommit=True)


def percentile(values, p):
    s = sorted(values)  # nearest rank
    return s[max(0, math.ceil(p / 100.0 * len(s)) - 1)]


# The probe: the pipeline reads the changelog and commits into bench.dst.
db = connect()
t0 = time.time()
probe = 0
while True:
    with db.cursor() as c:
        c.execute("SELECT count(*) FROM bench.dst WHERE b = -1")
        if c.fetchone()[0] > 0:
            break
    if time.time() - t0 > 120:
        raise SystemExit("the pipeline did not copy the probe row within 120 s")
    if time.time() - t0 > probe * 5:
        stream_load("probe_%d" % probe, b"%d,-1,%d,probe\n" % (-1 - probe, int(time.time() * 1000)))
        probe += 1
    time.sleep(0.2)
print("pipeline following the changelog (probe seen after %.1f s)" % (time.time() - t0), file=sys.stderr)

committed = {}   # load -> time its commit returned
sent = {}        # load -> time it was sent
visible = {}     # load -> time the first query that saw all its rows returned its result
poll_secs = []
done = threading.Event()


def writer():
    interval = 1.0 / per_sec
    start = time.time()
    k = 0
    try:
        while time.time() - start < seconds:
            due = start + k * interval
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            ms = int(time.time() * 1000)
            base = k * per_load
            body = "".join("%d,%d,%d,name_%d\n" % (base + i, k, ms, base + i) for i in range(per_load)).encode()
            sent[k] = ms / 1000.0
            stream_load("lag_%d" % k, body)
            committed[k] = time.time()
            k += 1
    except BaseException as e:
        writer.error = e
    finally:
        writer.elapsed = time.time() - start
        writer.loads = k
        done.set()


writer.error = None


def poller():
    conn = connect()
    low = 0  # every load below this one has been seen
    deadline = None
    while True:
        asked = time.time()
        with conn.cursor() as c:
            c.execute("SELECT b, count(*) FROM bench.dst WHERE b >= %d GROUP BY b" % low)
            rows = c.fetchall()
        answered = time.time()  # the rows below were visible by now, at the latest
        poll_secs.append(answered - asked)
        for b, n in rows:
            if n == per_load and b not in visible:
                visible[b] = answered
        while low in visible:
            low += 1
        if done.is_set():
            if low >= writer.loads:
                return
            deadline = deadline or time.time() + 60
            if time.time() > deadline:
                return
        time.sleep(max(0.0, 0.1 - (time.time() - asked)))


w = threading.Thread(target=writer)
p = threading.Thread(target=poller)
w.start()
p.start()
w.join()
p.join()
if writer.error is not None:
    sys.exit("the writer failed: %s" % writer.error)

loads = writer.loads
lags = [visible[k] - committed[k] for k in range(loads) if k in visible]
from_send = [visible[k] - sent[k] for k in range(loads) if k in visible]
commit_secs = [committed[k] - sent[k] for k in range(loads)]
print("writes: %d loads of %d rows in %.1f s = %.0f rows/s (target %.0f); commit returned after p50 %.3f s, max %.3f s"
      % (loads, per_load, writer.elapsed, loads * per_load / writer.elapsed, per_load * per_sec,
         statistics.median(commit_secs), max(commit_secs)))
with db.cursor() as c:
    c.execute("SELECT count(*) FROM bench.dst WHERE b >= 0")
    in_target = c.fetchone()[0]
print("target: %d of %d rows; %d of %d loads seen in full; poll query p50 %.3f s, max %.3f s"
      % (in_target, loads * per_load, len(lags), loads, statistics.median(poll_secs), max(poll_secs)))
if lags:
    print("lag (source commit returned -> visible in target): p50 %.2f s  p99 %.2f s  max %.2f s"
          % (percentile(lags, 50), percentile(lags, 99), max(lags)))
    print("lag (load sent -> visible in target):             p50 %.2f s  p99 %.2f s  max %.2f s"
          % (percentile(from_send, 50), percentile(from_send, 99), max(from_send)))
    print("P99 %.3f" % percentile(lags, 99))
if len(lags) < loads:
    sys.exit("%d loads never became visible in full" % (loads - len(lags)))
