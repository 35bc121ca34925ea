#!/usr/bin/env bash
# Two tenants on one `sluice serve`, one hostile: does the other keep its throughput?
#
# A `sluice serve` (release) with its embedded doris-lite and tenants `good` and `bad`
# (plugin_threads 2, so one plugin thread each; `bad` restarts after 200 ms, at most 1 s apart,
# up to 1000 times, its plugins may use 3 s of CPU a minute together: plugin_cpu_per_minute, and
# it may make 60 API calls that change something a minute: api_writes_per_minute). `good` runs N rows of datagen → the student-trans plugin → the Doris sink
# (2PC, checkpoint 1 s) into a DUPLICATE table, timed from its submit until the API says
# `finished`; rows/s = N ÷ that time. Measured alone, then beside `bad`, which meanwhile runs a
# plugin that loops (killed at its 1 s call limit, restarted, again), a plugin that eats memory
# (stopped at its 64 MB limit, restarted, again), and floods the API with submissions (a refused
# one, a malformed one and a good one that is deleted again, in a loop). Each case RUNS times,
# alternating which goes first, each on a fresh server and table; the medians are compared.
# Beside `bad`, `good` starts once bad's CPU budget is spent (its first minute's burst is over).
# The flood's client runs at nice 19, standing for a client on another machine.
#
#   host/benches/serve_isolation.sh [N] [RUNS]                 # default 1,000,000 rows, 3 runs
#   SLUICE_BIN=… host/benches/serve_isolation.sh
#   BAD_CPU=10s BAD_WRITES=600 host/benches/serve_isolation.sh # other quotas for `bad`
#
# Prints each run's rows/s, the medians and the ratio beside ÷ alone (target: ≥ 0.85), and how
# often `bad` was refused and restarted. Needs: cargo, mysql (or mariadb) CLI, curl, python3, awk.
# doris-lite runs inside the server's process, so its CPU counts in what the tenants share.
set -euo pipefail

N="${1:-1000000}"
RUNS="${2:-3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$HERE/common.sh"
if [ -n "${SLUICE_BIN:-}" ]; then
  SLUICE="$SLUICE_BIN"
else
  cargo build --profile bench -q -p sluice --bin sluice --manifest-path "$REPO/Cargo.toml"
  SLUICE="$CARGO_TARGET_DIR/release/sluice"
fi
PLUGINS="$REPO/plugins/target/wasm32-wasip2/release"
if [ ! -f "$PLUGINS/student_trans.wasm" ] || [ ! -f "$PLUGINS/hostile.wasm" ]; then
  (cd "$REPO/plugins" && env -u CARGO_TARGET_DIR cargo build -q --release --target wasm32-wasip2)
fi
hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }

pipeline() { # name table rows rate transform
  cat <<EOF
[pipeline]
name = "$1"
checkpoint_interval = "1s"
[[source]]
type = "datagen"
schema = "id BIGINT, name VARCHAR(64), age INT"
rows_per_second = $4
number_of_rows = $3
fields.id = { kind = "sequence", start = 1 }
fields.age = { min = 1, max = 50 }
$5
[[sink]]
type = "doris"
table = "$2"
EOF
}
plugin() { printf '[[transform]]\ntype = "wasm"\nplugin = "%s"\n%s' "$1" "${2:-}"; }

# One server: $1 = alone|beside. Prints good's rows/s.
run_case() {
  local dir="$WORK/$1-$2" port
  mkdir -p "$dir/plugins"
  cp "$PLUGINS/student_trans.wasm" "$PLUGINS/hostile.wasm" "$dir/plugins/"
  printf '%s\n' "CREATE DATABASE IF NOT EXISTS good;" "CREATE DATABASE IF NOT EXISTS bad;" \
    "CREATE TABLE good.students (id BIGINT, name VARCHAR(64), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 4;" \
    >"$dir/init.sql"
  cat >"$dir/server.toml" <<EOF
[server]
listen = "127.0.0.1:0"
plugin_dir = "plugins"
plugin_threads = 2
[connections.dw]
type = "doris"
fenodes = "embedded"
init_sql = "init.sql"
[tenants.good]
token_sha256 = "$(hash good-token)"
connections = ["dw"]
write = ["good.*"]
[tenants.bad]
token_sha256 = "$(hash bad-token)"
connections = ["dw"]
write = ["bad.*"]
max_pipelines = 50
plugin_memory = "64MB"
plugin_timeout = "1s"
plugin_cpu_per_minute = "${BAD_CPU:-3s}"
api_writes_per_minute = ${BAD_WRITES:-60}
restart = { max_restarts = 1000, backoff = "200ms", max_backoff = "1s" }
EOF
  "$SLUICE" serve --config "$dir/server.toml" 2>"$dir/serve.log" &
  local pid=$!
  track "$pid"
  for _ in $(seq 1 200); do grep -q '^sluice serve: http://' "$dir/serve.log" && break; sleep 0.1; done
  local url
  url=$(sed -n 's|^sluice serve: \(http://[^/]*\)/.*|\1|p' "$dir/serve.log")
  QPORT=$(sed -n 's/.*mysql -h 127.0.0.1 -P \([0-9]*\) -u root.*/\1/p' "$dir/serve.log" | head -1)
  local flood=""
  if [ "$1" = beside ]; then
    submit bad-token "$url" "$(pipeline looping bad.x 1000000000 1000 "$(plugin hostile.wasm 'config.mode = "loop"')")" >/dev/null
    submit bad-token "$url" "$(pipeline eating bad.y 1000000000 1000 "$(plugin hostile.wasm 'config.mode = "memory"')")" >/dev/null
    # The flood's client (bash forking curl) runs at the lowest priority: on this one machine it
    # stands for a client on another host, so what is measured is the server's work for it.
    (
      renice -n 19 "$BASHPID" >/dev/null
      while true; do
        submit bad-token "$url" "$(pipeline steal good.students 10 10 '')" >/dev/null
        submit bad-token "$url" "[pipeline" >/dev/null
        submit bad-token "$url" "$(pipeline churn bad.z 10 10 '')" >/dev/null
        curl -s -o /dev/null -X DELETE -H "Authorization: Bearer bad-token" "$url/api/v1/pipelines/bad.churn"
        echo >>"$dir/flood"
      done
    ) &
    flood=$!
    track "$flood"
    # Good starts once bad's budget is spent (its loop has been paused), i.e. in the steady state
    # of a tenant that stays hostile; its first minute's CPU is a burst the bucket allows.
    for _ in $(seq 1 600); do
      curl -s "$url/metrics" | grep -q '^sluice_plugin_paused_seconds_total{tenant="bad"} [1-9]' && break
      sleep 0.1
    done
  fi
  local t0 t1
  t0=$(now)
  submit good-token "$url" "$(pipeline students good.students "$N" 100000000 "$(plugin student_trans.wasm)")" >/dev/null
  while ! curl -s -H "Authorization: Bearer good-token" "$url/api/v1/pipelines/good.students" | grep -q '"state":"finished"'; do
    sleep 0.05
  done
  t1=$(now)
  local rows
  rows=$(sql "SELECT count(*) FROM good.students")
  [ "$rows" = "$N" ] || { echo "good.students has $rows rows, not $N" >&2; exit 1; }
  if [ -n "$flood" ]; then
    kill "$flood" 2>/dev/null || true
    local restarts
    restarts=$(curl -s -H "Authorization: Bearer bad-token" "$url/api/v1/pipelines/bad.looping" | python3 -c 'import json,sys; print(json.load(sys.stdin)["restarts"])')
    echo "    bad: $(wc -l <"$dir/flood" 2>/dev/null || echo 0) flood rounds (4 calls each), looping pipeline restarted $restarts times" >&2
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  calc "$N / ($t1 - $t0)"
}

submit() { # token url body
  curl -s -X POST -H "Authorization: Bearer $1" -H "Content-Type: application/toml" --data-binary "$3" "$2/api/v1/pipelines"
}

alone=() beside=()
for r in $(seq 1 "$RUNS"); do
  for c in $( [ $((r % 2)) = 1 ] && echo "alone beside" || echo "beside alone"); do
    v=$(run_case "$c" "$r")
    echo "run $r $c: $v rows/s" >&2
    if [ "$c" = alone ]; then alone+=("$v"); else beside+=("$v"); fi
  done
done
a=$(printf '%s\n' "${alone[@]}" | median)
b=$(printf '%s\n' "${beside[@]}" | median)
echo "good alone:        $a rows/s (median of $RUNS)"
echo "good beside bad:   $b rows/s (median of $RUNS)"
echo "ratio beside/alone: $(calc "$b / $a") (target >= 0.85)"
