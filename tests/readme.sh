#!/usr/bin/env bash
# The README's commands, exactly as written, from the root of a fresh clone with no plugin built:
# the quick start, `sluice plugin test` on the quick start's plugin (in Rust, Python and JavaScript), a
# Python plugin from `sluice plugin new`, the sync commands'
# `--print-pipeline` examples, the MySQL and PostgreSQL mirrors and `sluice verify` of the first. Each line is taken
# from README.md itself, so the test and the README cannot drift apart.
set -euo pipefail
cd "$(dirname "$0")/.."
# The README's commands run as a user runs them: plugin crates build into their own target dirs.
unset SLUICE_PLUGIN_TARGET_DIR
root=$(pwd)

readme_line() {
  # The README line that starts with "$1" (after an optional "$ " prompt), without its comment.
  local line
  line=$(awk -v want="$1" '{ sub(/^\$ /, "") } index($0, want) == 1 { print; exit }' README.md)
  [ -n "$line" ] || { echo "README.md has no line starting with: $1" >&2; exit 1; }
  printf '%s' "${line%%  #*}"
}

quick_start=$(readme_line 'cargo run --release -p sluice -- run pipelines/quickstart.toml')
rows_line=$(readme_line "printf '{\"name\":\"James\"")
plugin_test=$(readme_line 'sluice plugin test plugins/student-trans --input rows.jsonl')
py_new=$(readme_line 'sluice plugin new shout --lang python')
py_test=$(readme_line 'sluice plugin test shout --input shout/rows.jsonl')
py_student=$(readme_line 'sluice plugin test plugins/python/student-trans --input rows.jsonl')
js_student=$(readme_line 'sluice plugin test plugins/js/student-trans --input rows.jsonl')
load_shop=$(readme_line 'mysql -h 127.0.0.1 -u root < pipelines/mysql-sync.sql')
mirror=$(readme_line 'cargo run --release -p sluice -- run pipelines/mysql-sync.toml')
load_pg=$(readme_line 'psql -h 127.0.0.1 -U postgres -d postgres -q -f pipelines/postgres-sync.sql')
verify=$(readme_line 'cargo run --release -p sluice -- verify pipelines/mysql-sync.toml')
pg_mirror=$(readme_line 'cargo run --release -p sluice -- run pipelines/postgres-sync.toml')
serve_build=$(readme_line 'cargo run --release -p sluice -- plugin inspect plugins/student-trans')
serve_start=$(readme_line 'cargo run --release -p sluice -- serve --config pipelines/serve/server.toml &')
serve_token=$(readme_line 'export SLUICE_TOKEN=analytics-demo-token')
serve_upload=$(readme_line 'curl -sf -X PUT -H "Authorization: Bearer $SLUICE_TOKEN" --data-binary @plugins/target')
serve_submit=$(readme_line 'curl -sf -H "Authorization: Bearer $SLUICE_TOKEN" -H "Content-Type: application/toml"')
serve_status=$(readme_line 'curl -sf -H "Authorization: Bearer $SLUICE_TOKEN" http://127.0.0.1:8080/api/v1/pipelines/')

work=$(mktemp -d)
maria_pid=""
pg_pid=""
serve_pid=""
trap '[ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; [ -n "$maria_pid" ] && kill "$maria_pid" 2>/dev/null; [ -n "$pg_pid" ] && kill "$pg_pid" 2>/dev/null; rm -rf "$work"' EXIT
# The clone: in a new directory, or afresh at $SLUICE_README_CLONE (the test command keeps one
# place, so that its incremental release builds find their caches again).
clone="${SLUICE_README_CLONE:-$work/sluice}"
rm -rf "$clone"
git clone -q "$root" "$clone"
cd "$clone"
# A clone has no plugins/target: the quick start must build the plugin itself.
[ ! -e plugins/target ]

# SLUICE_BUILD_TIMINGS=<dir>: the quick start's first build is measured — the same release build of
# `sluice` with `--timings`, in the clone, before the quick start runs; its report and its slowest
# units go to <dir>.
if [ -n "${SLUICE_BUILD_TIMINGS:-}" ]; then
  echo "\$ cargo build --release -p sluice --timings"
  cargo build --release -p sluice --timings
  mkdir -p "$SLUICE_BUILD_TIMINGS"
  cp "${CARGO_TARGET_DIR:-target}/cargo-timings/cargo-timing.html" "$SLUICE_BUILD_TIMINGS/"
  python3 "$root/tests/tools/timings.py" "$SLUICE_BUILD_TIMINGS/cargo-timing.html" 10 | tee "$SLUICE_BUILD_TIMINGS/slowest.txt"
fi
echo "\$ $quick_start"
out=$(bash -c "$quick_start" 2>&1) || { echo "$out"; echo "FAILED: the quick start" >&2; exit 1; }
echo "$out"
for want in "|  1 | prefix_James |  19 |" "|  2 | prefix_Emily |  29 |" "2 rows in set"; do
  grep -qF -- "$want" <<<"$out" || { echo "FAILED: the quick start printed no line \"$want\"" >&2; exit 1; }
done

# `sluice` is the binary the quick start just built.
export PATH="${CARGO_TARGET_DIR:-$PWD/target}/release:$PATH"
echo "\$ $rows_line"
bash -c "$rows_line"
echo "\$ $plugin_test"
out=$(bash -c "$plugin_test") || { echo "$out"; echo "FAILED: sluice plugin test" >&2; exit 1; }
echo "$out"
[ "$out" = $'prefix_James 19\nprefix_Emily 29' ] \
  || { echo "FAILED: sluice plugin test printed something else" >&2; exit 1; }

# A Python plugin as generated, and the quick start's transform in Python (componentize-py from
# $SLUICE_COMPONENTIZE_PY, which the test command installs).
for cmd in "$py_new" "$py_test" "$py_student"; do
  echo "\$ $cmd"
  out=$(bash -c "$cmd") || { echo "$out"; echo "FAILED: $cmd" >&2; exit 1; }
  echo "$out"
done
[ "$(bash -c "$py_test")" = $'JAMES 18\nEMILY 28' ] || { echo "FAILED: the generated Python plugin printed something else" >&2; exit 1; }
[ "$out" = $'prefix_James 19\nprefix_Emily 29' ] || { echo "FAILED: the Python student-trans printed something else" >&2; exit 1; }
echo "\$ $js_student"
out=$(bash -c "$js_student") || { echo "$out"; echo "FAILED: $js_student" >&2; exit 1; }
echo "$out"
[ "$out" = $'prefix_James 19\nprefix_Emily 29' ] || { echo "FAILED: the JavaScript student-trans printed something else" >&2; exit 1; }

# The sync command's example, continuation lines and all: --print-pipeline needs no server.
sync_command=$(awk '/^sluice mysql-sync-database /{on=1} on{print} on && !/\\$/{exit}' "$clone/README.md")
[ -n "$sync_command" ] || { echo "README.md has no sluice mysql-sync-database example" >&2; exit 1; }
echo "\$ $sync_command"
out=$(bash -c "$sync_command") || { echo "$out"; echo "FAILED: sluice mysql-sync-database" >&2; exit 1; }
grep -qF 'database = "test_db"' <<<"$out" || { echo "$out"; echo "FAILED: the printed pipeline has no target database" >&2; exit 1; }
if grep -qF '123456' <<<"$out"; then echo "FAILED: the printed pipeline shows a password" >&2; exit 1; fi
# The MySQL mirror runs against the machine's MariaDB on 127.0.0.1:3306, as the README says; where
# none answers there, one is started on that port for this test.
if ! mysql -h 127.0.0.1 -u root -e 'SELECT 1' >/dev/null 2>&1; then
  mkdir -p "$work/maria/tmp"
  mariadb-install-db --no-defaults --auth-root-authentication-method=normal --skip-test-db --user=root \
    --datadir="$work/maria/data" --tmpdir="$work/maria/tmp" >/dev/null
  mariadbd --no-defaults --datadir="$work/maria/data" --tmpdir="$work/maria/tmp" --port=3306 \
    --bind-address=127.0.0.1 --socket="$work/maria/sock" --user=root >/dev/null 2>&1 &
  maria_pid=$!
  for _ in $(seq 1 100); do mysql -h 127.0.0.1 -u root -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
fi
echo "\$ $load_shop"
bash -c "$load_shop"
echo "\$ $mirror"
out=$(bash -c "$mirror" 2>&1) || { echo "$out"; echo "FAILED: the MySQL mirror" >&2; exit 1; }
echo "$out"
grep -qE '^finished at checkpoint [0-9]+: 10 rows read, 10 rows written' <<<"$out" \
  || { echo "FAILED: the MySQL mirror did not write the 10 rows of pipelines/mysql-sync.sql" >&2; exit 1; }
echo "\$ $verify"
out=$(bash -c "$verify" 2>&1) || { echo "$out"; echo "FAILED: sluice verify of the MySQL mirror" >&2; exit 1; }
echo "$out"
grep -qxF 'verify: 3 tables, 10 rows: the copy equals the source' <<<"$out" \
  || { echo "FAILED: sluice verify did not find the MySQL mirror equal to its source" >&2; exit 1; }

# The PostgreSQL sync command's example, and the mirror from the machine's PostgreSQL on
# 127.0.0.1:5432 (one is started on that port for this test where none answers).
pg_sync=$(awk '/^sluice postgres-sync-database /{on=1} on{print} on && !/\\$/{exit}' "$clone/README.md")
[ -n "$pg_sync" ] || { echo "README.md has no sluice postgres-sync-database example" >&2; exit 1; }
echo "\$ $pg_sync"
out=$(bash -c "$pg_sync") || { echo "$out"; echo "FAILED: sluice postgres-sync-database" >&2; exit 1; }
grep -qF 'slot_name = "test"' <<<"$out" || { echo "$out"; echo "FAILED: the printed pipeline has no slot" >&2; exit 1; }
if grep -qF '123456' <<<"$out"; then echo "FAILED: the printed pipeline shows a password" >&2; exit 1; fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1; then
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
  mkdir -p "$work/pg" && chown postgres "$work/pg"
  runuser -u postgres -- "$pg_bin/initdb" --auth=trust --username=postgres -D "$work/pg/data" >/dev/null
  runuser -u postgres -- "$pg_bin/postgres" -D "$work/pg/data" -p 5432 -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories="$work/pg" >/dev/null 2>&1 &
  pg_pid=$!
  for _ in $(seq 1 100); do psql -h 127.0.0.1 -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
fi
echo "\$ $load_pg"
bash -c "$load_pg"
echo "\$ $pg_mirror"
out=$(bash -c "$pg_mirror" 2>&1) || { echo "$out"; echo "FAILED: the PostgreSQL mirror" >&2; exit 1; }
echo "$out"
grep -qE '^finished at checkpoint [0-9]+: 10 rows read, 10 rows written' <<<"$out" \
  || { echo "FAILED: the PostgreSQL mirror did not write the 10 rows of pipelines/postgres-sync.sql" >&2; exit 1; }
# `sluice serve` with the README's server file, on a free port instead of 8080 (the one change to
# its commands).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
on_port() { printf '%s' "${1//127.0.0.1:8080/127.0.0.1:$port}"; }
sed -i "s/127.0.0.1:8080/127.0.0.1:$port/" pipelines/serve/server.toml
echo "\$ $serve_build"
bash -c "$serve_build" >/dev/null
echo "\$ $serve_start"
serve_cmd=$(on_port "${serve_start% &}")
bash -c "exec $serve_cmd" >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 600); do grep -q '^sluice serve: http://' "$work/serve.log" && break; sleep 0.5; done
grep -q '^sluice serve: http://' "$work/serve.log" || { cat "$work/serve.log"; echo "FAILED: sluice serve did not start" >&2; exit 1; }
echo "\$ $serve_token"
eval "$serve_token"
for cmd in "$serve_upload" "$serve_submit"; do
  echo "\$ $cmd"
  out=$(bash -c "$(on_port "$cmd")") || { cat "$work/serve.log"; echo "FAILED: $cmd" >&2; exit 1; }
  echo "$out"
done
[ "$out" = '{"id":"analytics.students"}' ] || { echo "FAILED: the submit answered $out" >&2; exit 1; }
echo "\$ $serve_status"
for _ in $(seq 1 120); do
  out=$(bash -c "$(on_port "$serve_status")")
  grep -q '"state":"finished"' <<<"$out" && break
  sleep 0.5
done
echo "$out"
grep -q '"state":"finished"' <<<"$out" && grep -q '"rows_out":5000' <<<"$out" \
  || { cat "$work/serve.log"; echo "FAILED: the served pipeline did not finish with 5000 rows" >&2; exit 1; }
doris_port=$(sed -n 's/.*mysql -h 127.0.0.1 -P \([0-9]*\) -u root.*/\1/p' "$work/serve.log" | head -1)
rows=$(mysql -h 127.0.0.1 -P "$doris_port" -u root -N -B -e "SELECT count(*) FROM analytics.students WHERE name LIKE 'prefix_%'")
[ "$rows" = 5000 ] || { echo "FAILED: analytics.students has $rows transformed rows, not 5000" >&2; exit 1; }
# The README's refusal: the same file writing the other tenant's table.
sed 's/table = "analytics.students"/table = "marketing.students"/' pipelines/serve/students.toml >"$work/steal.toml"
out=$(curl -s -H "Authorization: Bearer $SLUICE_TOKEN" -H "Content-Type: application/toml" --data-binary @"$work/steal.toml" "http://127.0.0.1:$port/api/v1/pipelines")
want=$(grep -o 'pipeline.toml:19: sink (type "doris"): tenant `analytics` may not write `marketing.students`' README.md | head -1)
[ -n "$want" ] && grep -qF "$want" <<<"${out//\\\"/\"}" || { echo "$out"; echo "FAILED: the refusal is not the README's" >&2; exit 1; }
kill -TERM "$serve_pid" && wait "$serve_pid" || { cat "$work/serve.log"; echo "FAILED: sluice serve did not stop cleanly" >&2; exit 1; }
serve_pid=""
echo "README quick start, plugin test (Rust, Python and JavaScript), plugin new, sync examples, the MySQL and PostgreSQL mirrors and sluice serve: ok"
