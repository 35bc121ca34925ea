#!/usr/bin/env bash
# Regenerates the etcd API stubs kept in cluster/src/etcd/pb/ from cluster/proto/ (see
# generate/src/main.rs) and records, in generated.sha256, the files they come from and the stubs:
# the test command generates them again to compare only when that record no longer matches.
#
#   bash cluster/proto/generate.sh            regenerate, and record
#   bash cluster/proto/generate.sh --check    generate into a temporary directory and compare
#   bash cluster/proto/generate.sh --record   only record
set -euo pipefail
cd "$(dirname "$0")/../.."
record() {
  sha256sum cluster/proto/etcd/*/*.proto cluster/proto/generate/Cargo.toml cluster/proto/generate/Cargo.lock \
    cluster/proto/generate/src/main.rs cluster/src/etcd/pb/*.rs >cluster/proto/generated.sha256
}
case "${1:-}" in
  --record) record ;;
  --check) cargo run -q --locked --manifest-path cluster/proto/generate/Cargo.toml -- --check ;;
  "") cargo run -q --locked --manifest-path cluster/proto/generate/Cargo.toml && record ;;
  *) echo "usage: $0 [--check | --record]" >&2; exit 2 ;;
esac
