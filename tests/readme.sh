#!/usr/bin/env bash
# The README's commands, exactly as written, from the root of a fresh clone with no plugin built:
# the quick start, `sluice plugin test` on the quick start's plugin, the sync commands'
# `--print-pipeline` examples and the MySQL and PostgreSQL mirrors. Each line is taken
# from README.md itself, so the test and the README cannot drift apart.
set -euo pipefail
cd "$(dirname "$0")/.."
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
load_shop=$(readme_line 'mysql -h 127.0.0.1 -u root < pipelines/mysql-sync.sql')
mirror=$(readme_line 'cargo run --release -p sluice -- run pipelines/mysql-sync.toml')
load_pg=$(readme_line 'psql -h 127.0.0.1 -U postgres -d postgres -q -f pipelines/postgres-sync.sql')
pg_mirror=$(readme_line 'cargo run --release -p sluice -- run pipelines/postgres-sync.toml')

work=$(mktemp -d)
maria_pid=""
pg_pid=""
trap '[ -n "$maria_pid" ] && kill "$maria_pid" 2>/dev/null; [ -n "$pg_pid" ] && kill "$pg_pid" 2>/dev/null; rm -rf "$work"' EXIT
git clone -q "$root" "$work/sluice"
cd "$work/sluice"
# A clone has no plugins/target: the quick start must build the plugin itself.
[ ! -e plugins/target ]

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

# The sync command's example, continuation lines and all: --print-pipeline needs no server.
sync_command=$(awk '/^sluice mysql-sync-database /{on=1} on{print} on && !/\\$/{exit}' "$work/sluice/README.md")
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

# The PostgreSQL sync command's example, and the mirror from the machine's PostgreSQL on
# 127.0.0.1:5432 (one is started on that port for this test where none answers).
pg_sync=$(awk '/^sluice postgres-sync-database /{on=1} on{print} on && !/\\$/{exit}' "$work/sluice/README.md")
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
echo "README quick start, plugin test, sync examples and the MySQL and PostgreSQL mirrors: ok"
