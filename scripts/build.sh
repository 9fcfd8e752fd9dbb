#!/usr/bin/env bash
# Configures and builds hvdrun into build/ (or $BUILD_DIR), Release by default.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# Arguments before --target go to cmake; --target NAME builds only that target.
cfg=() target=()
while (($#)); do
  if [ "$1" = --target ]; then target+=(--target "$2"); shift 2; else cfg+=("$1"); shift; fi
done
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${cfg[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" "${target[@]}"
