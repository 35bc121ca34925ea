#!/usr/bin/env bash
# Kafka → decoder plugin → Doris, end to end: a tansu broker of this script (SQLite storage, own temp
# dir, free loopback port) with the topic `ops` of 4 partitions, and N JSON messages produced into it
# with confluent-kafka (no compression; each id's messages in partition id % 4), like
# `{"op_type":"insert","data":{"id":123,"name":"user_123","score":61.5}}`, one in ten an
# `"op_type":"delete"` of an earlier, still live id. Then, in the same run:
#   - baseline: a plain confluent-kafka consumer (Python; a unique group.id, auto.offset.reset =
#     earliest, enable.auto.commit = false; the 4 partitions by assignment, as Sluice reads them)
#     reading all N messages with consume(num_messages=10000, timeout=1) and discarding them;
#   - Sluice: `sluice run` of a `type = "kafka"` source (raw messages, earliest-offset, parallelism 2,
#     checkpoint 1 s) → the `op-type-delete-sign` decoder plugin (wasm) → the Doris sink (2PC,
#     exactly-once) into doris-lite's UNIQUE table db.users. Timed from sluice's start until the
#     offsets it reports to the group `sluice-kafka_bench` after each committed checkpoint sum to N;
#     then db.users must hold exactly the ids left live.
# Release builds; the plugin is built (wasm32-wasip2, release) if its component is missing.
#
#   host/benches/kafka_decode.sh [N]                            # default 1,000,000 messages
#   SLUICE_BIN=… DORIS_LITE_BIN=… host/benches/kafka_decode.sh  # skip the build
#   SLUICE_TANSU=… host/benches/kafka_decode.sh                 # tansu elsewhere than /var/tmp/sluice-tools
#
# Prints the production's messages/s (setup, not a result), the baseline consumer's messages/s,
# Sluice's messages/s end to end with its CPU (cores) and peak RSS (VmHWM), the Doris row check,
# the ratio Sluice ÷ baseline, and tansu's CPU (cores) during each read. Target: Sluice >= 0.5x the
# plain consumer's messages/s. tansu on SQLite serves fetches at a few MB/s, so both readers may be
# held to the broker's pace (the tansu CPU shows it); the ratio then says Sluice keeps up with it.
# Needs: cargo, the tansu broker (tests/run.sh installs it), mysql (or mariadb) CLI, awk, python3
# (confluent-kafka and pymysql are installed into a virtualenv, $SLUICE_BENCH_VENV or
# /var/tmp/sluice-bench-venv).
set -euo pipefail

N="${1:-1000000}"
PARTS=4
CKPT=1
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TANSU="${SLUICE_TANSU:-/var/tmp/sluice-tools/tansu/bin/tansu}"
PLUGIN="$REPO/plugins/target/wasm32-wasip2/release/op_type_delete_sign.wasm"
source "$HERE/common.sh"
# Stop what this script started (and let tansu close its SQLite file) before its files go.
kafka_decode_cleanup() {
  local p alive
  for p in "${BENCH_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    alive=0
    for p in "${BENCH_PIDS[@]:-}"; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  bench_cleanup
}
trap kafka_decode_cleanup EXIT
[ -x "$TANSU" ] || { echo "no tansu broker at $TANSU: run tests/run.sh (it installs it), or set SLUICE_TANSU" >&2; exit 1; }
bench_binaries
bench_venv "import confluent_kafka, pymysql" confluent-kafka pymysql
if [ ! -f "$PLUGIN" ]; then
  echo "building the op-type-delete-sign plugin (wasm32-wasip2, release)…" >&2
  env -u CARGO_TARGET_DIR nice -n 10 cargo build --release -q --target wasm32-wasip2 \
    --manifest-path "$REPO/plugins/Cargo.toml" -p op-type-delete-sign
fi
start_doris_lite

K="$WORK/tansu"
mkdir -p "$K"
KPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$K" && exec "$TANSU" broker --listener-url "tcp://127.0.0.1:$KPORT" --advertised-listener-url "tcp://127.0.0.1:$KPORT" \
  --storage-engine sqlite://tansu.db >/dev/null 2>"$K/broker.log") &
TANSU_PID=$!
track "$TANSU_PID"
for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$KPORT") 2>/dev/null && break; sleep 0.1; done
(exec 3<>"/dev/tcp/127.0.0.1/$KPORT") 2>/dev/null || { echo "tansu did not listen on $KPORT:" >&2; tail -20 "$K/broker.log" >&2; exit 1; }
"$TANSU" topic create ops --broker "tcp://127.0.0.1:$KPORT" --partitions "$PARTS" >"$K/topic.log" 2>&1 \
  || { echo "tansu topic create failed:" >&2; cat "$K/topic.log" >&2; exit 1; }

cat >"$WORK/helper.py" <<'PY'
"""kafka_decode.sh's helper: produce N | consume N | committed N TIMEOUT PID"""
import os, random, statistics, sys, time, uuid
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

BROKER, TOPIC, PARTS = "127.0.0.1:%s" % os.environ["KPORT"], "ops", int(os.environ["PARTS"])

def produce(n):
    """N messages, each id's in partition id % PARTS; prints N, seconds, the ids left live."""
    errors = []
    def failed(err, msg): errors.append(err)
    p = Producer({"bootstrap.servers": BROKER, "compression.type": "none", "linger.ms": 20,
                  "batch.num.messages": 10000, "queue.buffering.max.messages": 1000000,
                  "queue.buffering.max.kbytes": 1048576, "delivery.report.only.error": True, "on_delivery": failed})
    rng, last, deleted, t0 = random.Random(7), 0, set(), time.time()
    for i in range(n):
        if i % 10 == 9 and last > len(deleted):
            k = rng.randint(1, last)
            while k in deleted: k = rng.randint(1, last)
            deleted.add(k); op = "delete"
        else:
            last += 1; k = last; op = "insert"
        v = '{"op_type":"%s","data":{"id":%d,"name":"user_%d","score":%.1f}}' % (op, k, k, k % 1000 / 2)
        while True:
            try: p.produce(TOPIC, v.encode(), partition=k % PARTS); break
            except BufferError: p.poll(0.05)
        if i % 10000 == 0: p.poll(0)
    left = p.flush(300)
    if left or errors: sys.exit("produce: %d messages undelivered, %d failed (%s)" % (left, len(errors), errors[:3]))
    print("%d %.3f %d" % (n, time.time() - t0, last - len(deleted)))

def consume(n):
    """Reads the N messages of the topic from the start, discarding them; prints N, seconds."""
    t0 = time.time()
    c = Consumer({"bootstrap.servers": BROKER, "group.id": "baseline-" + uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p) for p in range(PARTS)])  # no committed offsets: earliest
    got = 0
    while got < n:
        for m in c.consume(num_messages=10000, timeout=1):
            if m.error(): raise KafkaException(m.error())
            got += 1
        if time.time() - t0 > 600: sys.exit("consume: %d of %d messages in 600 s" % (got, n))
    secs = time.time() - t0
    c.close(); print("%d %.3f" % (got, secs))

def committed(n, timeout, pid):
    """Waits until the offsets committed by sluice's group sum to N; prints that time (epoch s),
    how long the last committed() took and their median (the end is known that much late at most)."""
    c = Consumer({"bootstrap.servers": BROKER, "group.id": "sluice-kafka_bench", "enable.auto.commit": False})
    tps, t0, total, shown, took = [TopicPartition(TOPIC, p) for p in range(PARTS)], time.time(), 0, time.time(), []
    while time.time() - t0 < timeout:
        if not os.path.exists("/proc/%d" % pid): sys.exit("sluice exited; the group's offsets sum to %d of %d" % (total, n))
        asked = time.time()
        try:
            offsets = c.committed(tps, timeout=10)
            total = sum(max(tp.offset, 0) for tp in offsets if not tp.error)
        except KafkaException as e:
            print("committed(): %s" % e, file=sys.stderr)
        took.append(time.time() - asked)
        if total >= n: return print("%.3f %.3f %.3f" % (time.time(), took[-1], statistics.median(took)))
        if time.time() - shown >= 10:
            print("  the group's offsets sum to %d of %d after %.0f s" % (total, n, time.time() - t0), file=sys.stderr)
            shown = time.time()
        time.sleep(0.1)
    sys.exit("the group's offsets sum to %d of %d after %d s" % (total, n, timeout))

if __name__ == "__main__":
    cmd, args = sys.argv[1], list(map(int, sys.argv[2:]))
    {"produce": produce, "consume": consume, "committed": committed}[cmd](*args)
PY
cpu_secs() { calc "$(awk '{print $14 + $15}' "/proc/$1/stat") / $(getconf CLK_TCK)"; }
helper() { KPORT="$KPORT" PARTS="$PARTS" "$PY" "$WORK/helper.py" "$@"; }
sluice_failed() {
  echo "--- sluice log (errors, tail) ---" >&2
  grep -E 'ERROR|WARN|error' "$WORK/sluice.err" | tail -20 >&2 || tail -20 "$WORK/sluice.err" >&2
  exit 1
}

echo "producing $N messages into ops ($PARTS partitions, tansu on port $KPORT)…" >&2
PRODUCED=$(helper produce "$N")
read -r _ P_SECS LIVE <<<"$PRODUCED"
echo "baseline: a plain confluent-kafka consumer reading them…" >&2
k0=$(cpu_secs "$TANSU_PID")
CONSUMED=$(helper consume "$N")
read -r B_MSGS B_SECS <<<"$CONSUMED"
B_RATE=$(calc "$B_MSGS / $B_SECS")
B_TANSU=$(calc "($(cpu_secs "$TANSU_PID") - $k0) / $B_SECS")

sql "CREATE DATABASE db"
sql "CREATE TABLE db.users (id BIGINT, name VARCHAR(32), score DOUBLE) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 4"
cat >"$WORK/pipeline.toml" <<TOML
[pipeline]
name = "kafka_bench"
parallelism = 2
checkpoint_interval = "${CKPT}s"
state_dir = "$WORK/state"

[connections.events]
type = "kafka"
bootstrap_servers = ["127.0.0.1:$KPORT"]

[doris]
fenodes = ["$FE"]

[[source]]
type = "kafka"
connection = "events"
topics = ["ops"]
scan.startup.mode = "earliest-offset"

[[transform]]
type = "wasm"
plugin = "$PLUGIN"
schema = "id BIGINT, name VARCHAR(32), score DOUBLE"

[[sink]]
type = "doris"
table = "db.users"
TOML

echo "sluice run: $N messages → op-type-delete-sign → doris-lite…" >&2
k0=$(cpu_secs "$TANSU_PID")
t0=$(now)
SLUICE_LOG=info "$SLUICE" run "$WORK/pipeline.toml" 2>"$WORK/sluice.err" &
SLUICE_PID=$!
track "$SLUICE_PID"
COMMITTED=$(helper committed "$N" 900 "$SLUICE_PID") || sluice_failed
read -r t1 POLL_LAST POLL_P50 <<<"$COMMITTED"
S_SECS=$(calc "$t1 - $t0")
S_RATE=$(calc "$N / $S_SECS")
S_CPU=$(calc "$(cpu_secs "$SLUICE_PID") / $S_SECS")
S_TANSU=$(calc "($(cpu_secs "$TANSU_PID") - $k0) / $S_SECS")
S_RSS=$(awk '/^VmHWM/{print int($2 / 1024)}' "/proc/$SLUICE_PID/status")
ROWS=$(sql "SELECT count(*) FROM db.users")
kill -TERM "$SLUICE_PID"
wait "$SLUICE_PID" || { echo "sluice exited with $?:" >&2; tail -20 "$WORK/sluice.err" >&2; }
grep -E '^(stopped|finished) at checkpoint' "$WORK/sluice.err" || true
grep -E ' (ERROR|WARN) ' "$WORK/sluice.err" | head -5 | sed 's/^/sluice logged: /' || true

echo "--- summary ($(nproc) cores, $N messages, $PARTS partitions; tansu $("$TANSU" --version | awk '{print $2}'), SQLite storage) ---"
printf 'produce (confluent-kafka, no compression; setup, not a result): %d messages in %.2f s = %.0f messages/s\n' \
  "$N" "$P_SECS" "$(calc "$N / $P_SECS")"
printf 'baseline, a plain confluent-kafka consumer (Python, discarding): %d messages in %.2f s = %.0f messages/s; tansu CPU %.2f cores\n' \
  "$B_MSGS" "$B_SECS" "$B_RATE" "$B_TANSU"
printf 'sluice, Kafka → op-type-delete-sign (wasm) → doris-lite, exactly-once (parallelism 2, checkpoint %d s): %d messages in %.2f s = %.0f messages/s (sluice start → the group'"'"'s committed offsets sum to N, seen by a committed() of %.2f s, p50 %.2f s); sluice CPU %.2f cores, peak RSS %d MB; tansu CPU %.2f cores\n' \
  "$CKPT" "$N" "$S_SECS" "$S_RATE" "$POLL_LAST" "$POLL_P50" "$S_CPU" "$S_RSS" "$S_TANSU"
if [ "$ROWS" = "$LIVE" ]; then
  printf 'doris rows: %d = the live ids: ok\n' "$ROWS"
else
  printf 'doris rows: %s, expected %d live ids: WRONG\n' "$ROWS" "$LIVE"
fi
RATIO=$(calc "$S_RATE / $B_RATE")
printf 'sluice / baseline: %.2f\n' "$RATIO"
printf 'target: >= 0.5x the plain consumer: %s\n' "$(awk "BEGIN { print ($RATIO >= 0.5) ? \"met\" : \"not met\" }")"
printf 'load average (1, 5, 15 min) at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
[ "$ROWS" = "$LIVE" ]
