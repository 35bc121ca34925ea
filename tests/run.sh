#!/usr/bin/env bash
# The test command: installs what is missing, then checks formatting, lints and runs every test
# (host, doris-lite, the Rust and Python guest SDKs, and the plugins built for wasm32-wasip2 and
# with componentize-py).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Each step prints the time since the run began; the run ends with every step's time.
started=$(date +%s)
step_name="" step_start=$started timings=()
step_done() {
  [ -n "$step_name" ] || return 0
  timings+=("$(printf '%6ss  %s' $(($(date +%s) - step_start)) "$step_name")")
}
step() {
  step_done
  step_name="$*" step_start=$(date +%s)
  printf '\n==> %s  [%s s into the run]\n' "$*" $((step_start - started))
}
# Jobs run in the background (see in_background), by name; those still running at the end are stopped.
declare -A job_pids=()
stop_jobs() { for pid in "${job_pids[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done; }
report() {
  local status=$?
  stop_jobs
  step_done
  printf '\nsteps (elapsed):\n'
  printf '%s\n' "${timings[@]}"
  printf '%6ss  in all (exit %s)\n' $(($(date +%s) - started)) "$status"
}
trap report EXIT

# Where builds and test tools live (kept between runs on this machine): tests/env.sh.
source tests/env.sh
mkdir -p "$CARGO_TARGET_DIR" "$plugins_target"
if [ ! -e plugins/target ]; then ln -s "$plugins_target" plugins/target; fi
# Building needs nothing beyond Rust and a C compiler: no `protoc` (the etcd stubs are kept in
# cluster/src/etcd/pb/). Every build of this run proves it: PROTOC names a program that fails,
# and a `protoc` first on the PATH fails and leaves a mark.
no_protoc=$(mktemp -d /tmp/sluice-no-protoc.XXXXXX)
printf '#!/bin/sh\ntouch "%s/used"\necho "protoc is not available to builds of Sluice" >&2\nexit 1\n' "$no_protoc" >"$no_protoc/protoc"
chmod +x "$no_protoc/protoc"
export PROTOC=/bin/false PATH="$no_protoc:$PATH"

step "toolchain and test clients"
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed | grep -q '^clippy' || rustup component add clippy
missing=()
command -v curl >/dev/null || missing+=(curl)
command -v mysql >/dev/null || missing+=(mariadb-client)
# The MySQL source's tests start their own MariaDB (binlog on) from the server's binaries.
command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null || missing+=(mariadb-server)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# pydoris' SQLAlchemy dialect runs over mysqlclient, which pip builds against libmysqlclient.
pkg-config --exists mysqlclient 2>/dev/null || missing+=(default-libmysqlclient-dev pkg-config)
# The PostgreSQL source's tests start their own server (wal_level = logical) from its binaries.
command -v psql >/dev/null || missing+=(postgresql-client)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
# The cluster's tests run etcd (3 members).
command -v etcd >/dev/null || missing+=(etcd-server)
# The live view of `sluice serve` is tested in Debian's headless Chromium.
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# Installs that take long and that only the tests need run in the background, beside the checks
# and builds, each with its own log; a step that needs one waits for it (`await_job`).
job_logs=$(mktemp -d /tmp/sluice-run-jobs.XXXXXX)
in_background() { # name command…
  local name=$1; shift
  printf '    %s: in the background (log: %s)\n' "$name" "$job_logs/$name.log"
  ( "$@" ) >"$job_logs/$name.log" 2>&1 &
  job_pids[$name]=$!
}
await_job() { # name
  local name=$1 since
  since=$(date +%s)
  [ -n "${job_pids[$name]:-}" ] || return 0
  if ! wait "${job_pids[$name]}"; then
    cat "$job_logs/$name.log"; echo "FAILED: $name (in the background)" >&2; exit 1
  fi
  unset "job_pids[$name]"
  printf '    %s: ready (waited %s s for it)\n' "$name" $(($(date +%s) - since))
}

# The Kafka source's tests run a real broker: tansu, built once into a directory kept between runs
# like the target dirs (its SQLite storage), at a lower priority than the builds of Sluice beside
# it, and unoptimised: a test peer that moves a few thousand messages needs no more (the Kafka
# tests take as long against it), and it builds in 5 CPU-minutes.
if [ ! -x "$SLUICE_TANSU" ]; then
  in_background tansu env CARGO_TARGET_DIR="$tansu_root-target" CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    CARGO_PROFILE_RELEASE_DEBUG=false nice -n 10 \
    cargo install tansu --locked --version 0.6.0 --features libsql --root "$tansu_root"
fi

# Test tools live in directories kept between runs; each directory records what was installed in
# it (`.tools`) and is installed afresh when that list changes.
install_into() { # dir "tools" install-function
  local dir=$1 tools=$2 install=$3
  [ "$(cat "$dir/.tools" 2>/dev/null)" = "$tools" ] && return 0
  echo "installing $tools into $dir"
  rm -rf "$dir"
  "$install" "$dir" $tools
  echo "$tools" > "$dir/.tools"
}
pip_venv() { local dir=$1; shift; python3 -m venv "$dir" && "$dir/bin/pip" install -q "$@"; }
npm_dir() { local dir=$1; shift; mkdir -p "$dir" && echo '{"private": true}' > "$dir/package.json" && (cd "$dir" && npm install --no-audit --no-fund --silent "$@"); }

test_tools() {
  install_into "$venv" "playwright==1.65.2" pip_venv
  install_into "$clustervenv" "moto[server]==5.2.6" pip_venv
  install_into "$pyvenv" "componentize-py==0.25.1 pyarrow==26.0.1 pytest==9.2.0" pip_venv
  install_into "$jstools" "@bytecodealliance/componentize-js@0.23.0 esbuild@0.28.2 apache-arrow@21.2.0" npm_dir
}
in_background test-tools test_tools

step "no build needs protoc"
for crate in prost-build tonic-build tonic-prost-build protobuf-src protoc-bin-vendored; do
  out=$(cargo tree --workspace --target all -e all -i "$crate" 2>&1) && {
    echo "$out"; echo "the workspace depends on $crate, which runs protoc at build time" >&2; exit 1; }
  grep -q 'did not match any packages' <<<"$out" || { echo "$out"; echo "cargo tree failed" >&2; exit 1; }
done
# The etcd stubs kept in cluster/src/etcd/pb/ are what cluster/proto/ generates: unchanged since
# `cluster/proto/generate.sh` recorded them with the files they come from, or else generated again
# and compared (beside the builds; the run waits for it at the end).
stubs_recorded=true
if ! sha256sum --quiet --check cluster/proto/generated.sha256; then
  stubs_recorded=false
  in_background proto-stubs env CARGO_TARGET_DIR="$(dirname "$CARGO_TARGET_DIR")/proto-generate" nice -n 10 \
    bash cluster/proto/generate.sh --check
fi

step "cargo fmt --check"
cargo fmt --all --check
cargo fmt --manifest-path plugins/Cargo.toml --all --check

# The plugins build into plugins/target (a link to $plugins_target), where the host's tests find them.
plugins_cargo() { local cmd=$1; shift; CARGO_TARGET_DIR="$plugins_target" cargo "$cmd" --manifest-path plugins/Cargo.toml "$@"; }

step "plugins (wasm32-wasip2)"
plugins_cargo build --release --target wasm32-wasip2
plugins_cargo clippy --release --target wasm32-wasip2 --all-targets -- -D warnings

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
# The production build: no embedded doris-lite in it.
cargo clippy -p sluice --no-default-features -- -D warnings
if cargo tree -p sluice --no-default-features -e normal,build --prefix none | grep -q '^doris-lite '; then
  echo "sluice --no-default-features depends on doris-lite" >&2; exit 1
fi

step "tests: guest SDK"
await_job test-tools
plugins_cargo test -p sluice-guest
plugins_cargo test -p sluice-guest --features json --lib json::

step "tests: Python guest SDK (its Arrow IPC codec against pyarrow)"
(cd guest-sdk/python && "$pyvenv/bin/python" -m pytest -q -p no:cacheprovider -W error tests)

step "tests: JavaScript guest SDK (under Node, against apache-arrow)"
(cd guest-sdk/js && node --import ./test/register.mjs --test test/)

# The test binaries are compiled while tansu (the Kafka tests' broker) may still be building. Then
# the README's quick start (a release build in a fresh clone) runs beside the tests, at a lower
# priority: the tests mostly wait on servers, and the build takes the cores they leave. The Kafka
# tests run last, once tansu is there.
step "tests: host and doris-lite (build)"
cargo test --workspace --no-run

# The clone is made afresh in one place, and its release builds are kept in their own target dir,
# incremental and unoptimised (no debug info; Cranelift stays optimised, see Cargo.toml): what the
# README's commands do is the same, a run after a small change recompiles only what changed, and a
# cold run compiles about half as much. A run that measures the first build (SLUICE_BUILD_TIMINGS)
# builds as a user's `cargo run` does.
readme_profile=(CARGO_PROFILE_RELEASE_INCREMENTAL=true CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=false)
[ -z "${SLUICE_BUILD_TIMINGS:-}" ] || readme_profile=(CARGO_PROFILE_RELEASE_INCREMENTAL=false)
in_background readme env SLUICE_README_CLONE="$(dirname "$CARGO_TARGET_DIR")/readme-clone" \
  CARGO_TARGET_DIR="$(dirname "$CARGO_TARGET_DIR")/readme" "${readme_profile[@]}" \
  nice -n 10 bash tests/readme.sh

step "tests: host and doris-lite, all but Kafka"
cargo test --workspace -- --skip kafka::

step "tests: Kafka (host)"
await_job tansu
cargo test --workspace -- kafka::

step "tests: the live view of sluice serve in headless Chromium"
cargo test -p sluice --test it serve::the_live_view -- --ignored

step "the README's quick start, from a fresh clone"
await_job readme
tail -n 1 "$job_logs/readme.log"

step "the etcd stubs are what cluster/proto/ generates"
if $stubs_recorded; then
  echo "cluster/src/etcd/pb/ and cluster/proto/ are as cluster/proto/generated.sha256 records them"
else
  await_job proto-stubs
  echo "cluster/proto/generated.sha256 does not match: record the stubs with \`bash cluster/proto/generate.sh --record\`" >&2
  exit 1
fi

step "no build used protoc"
[ ! -e "$no_protoc/used" ] || { echo "a build ran protoc" >&2; exit 1; }
