# Shared by the end-to-end benchmark scripts (sourced, not run): release binaries, a doris-lite
# process on ephemeral ports, a virtualenv for Python clients, and small helpers.
#
# Before sourcing, set REPO (the repository root). Afterwards: $WORK (a temp dir removed on exit),
# bench_binaries (sets $SLUICE and $DORIS), start_doris_lite [FLAG…] (sets $FE, $BE, $QPORT, $FPORT,
# $DORIS_PID), bench_venv CHECK PKG… (sets $PY), sql, now, calc, median, best, and track PID (killed
# on exit).

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-build/release}"
WORK="$(mktemp -d)"
BENCH_PIDS=()
bench_cleanup() {
  for p in "${BENCH_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap bench_cleanup EXIT
track() { BENCH_PIDS+=("$1"); }

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

sql() { mysql -h127.0.0.1 -P"$QPORT" -uroot -N -B -e "$1"; }
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { sort -g | head -1; }
