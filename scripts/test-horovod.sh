#!/usr/bin/env bash
# Real Horovod programs under hvdrun against horovodrun (pytest, tests/horovod), with the
# peer venv's python: scripts/horovod-peer.sh builds Horovod 0.28.1 into it when it is
# missing (the first time: see README for how long) and reuses it after; a failed build
# fails this script. The tests across two test-cluster hosts take /tmp/hvdrun-cluster.lock
# themselves (they need root; skipped, saying why, otherwise).
# Needs hvdrun built in $BUILD_DIR (scripts/build.sh). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PY=$(scripts/horovod-peer.sh | tail -1)
echo "test-horovod: $PY ($("$PY" -c 'import horovod, torch; print("horovod", horovod.__version__, "torch", torch.__version__)'))"
HVDRUN_PEER_PYTHON=$PY HVDRUN_BIN=${HVDRUN_BIN:-$PWD/$BUILD_DIR/cli/hvdrun} \
  "$PY" -m pytest -q -p no:cacheprovider tests/horovod "$@"
