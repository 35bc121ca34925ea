#!/usr/bin/env bash
# The CDC fuzzer for longer: `rounds` seeded rounds per source (MySQL/MariaDB and PostgreSQL) of
# random tables, changes and `kill -9`, each ending in `sluice verify`. A failing round prints its
# seed; `SLUICE_FUZZ_SEED=<seed> bash tests/soak.sh 1` replays it.
#
#   bash tests/soak.sh [rounds]      (default 20; run `bash tests/run.sh` once first)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/env.sh
export SLUICE_FUZZ_ROUNDS="${1:-20}"
export SLUICE_FUZZ_SEED="${SLUICE_FUZZ_SEED:-random}"
cargo test -p sluice --test it -- fuzz::a_ --nocapture
