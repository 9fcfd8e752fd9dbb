#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a real 4-rank job on localhost.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cmake --install build --prefix "$PWD/_install" >/dev/null
echo "== hvdrun -np 4 (localhost) =="
exec _install/bin/hvdrun -np 4 _install/bin/hvdrun-allreduce-demo
