# Where the test command keeps what it builds and installs, as environment variables: sourced by
# tests/run.sh (which installs what is missing there) and tests/stress.sh (which runs the suite
# again with what run.sh left). Directories outside the checkout are kept between runs on the
# same machine, so a fresh clone rebuilds only our crates. Each can be moved with the variable
# named beside it.

# Build outputs.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-build/host}"
plugins_target="${SLUICE_PLUGINS_TARGET_DIR:-/var/tmp/sluice-build/plugins}"
# The host's tests load the plugins from plugins/target: a link to $plugins_target, unless this
# checkout already has its own.
if [ -d plugins/target ] && [ ! -L plugins/target ]; then plugins_target="$PWD/plugins/target"; fi
# Plugin crates Sluice builds itself (the scaffold test's, the README clone's) share that target
# dir: the guest SDK's dependencies are compiled once.
export SLUICE_PLUGIN_TARGET_DIR="$plugins_target"
export CARGO_TERM_COLOR=never

# The Kafka tests' broker (tansu, built from crates.io).
tansu_root="${SLUICE_TOOLS_DIR:-/var/tmp/sluice-tools}/tansu"
export SLUICE_TANSU="${SLUICE_TANSU:-$tansu_root/bin/tansu}"
# Playwright (Python), which drives headless Chromium for the live view of `sluice serve`.
venv="${SLUICE_VENV:-/var/tmp/sluice-venv}"
export SLUICE_PLAYWRIGHT_PYTHON="$venv/bin/python"
# The cluster's checkpoints are tested against an S3 server: moto's.
clustervenv="${SLUICE_CLUSTER_VENV:-/var/tmp/sluice-cluster-venv}"
export SLUICE_MOTO_SERVER="$clustervenv/bin/moto_server"
# Python plugins are built with componentize-py; the Python guest SDK's tests check its Arrow IPC
# codec against pyarrow.
pyvenv="${SLUICE_PY_VENV:-/var/tmp/sluice-py-plugins-venv}"
export SLUICE_COMPONENTIZE_PY="$pyvenv/bin/componentize-py"
# JavaScript plugins are bundled with esbuild and built with componentize-js; the JavaScript
# guest SDK's tests run under Node.
jstools="${SLUICE_JS_TOOLS:-/var/tmp/sluice-js-tools}"
export SLUICE_JS_TOOLS="$jstools"
