#!/usr/bin/env bash
# Elastic recovery side by side (issue 28): hvdrun --horovod-compat against horovodrun
# --gloo elastic (the real Horovod 0.28.1 of scripts/horovod-peer.sh) and torchrun (c10d
# rendezvous, --max-restarts), one training loop (bench/elastic_train.py), the tools
# alternating within each round; what is measured: bench/elastic_bench.py's docstring.
#   ROUNDS (3)  TOOLS (hvdrun,horovodrun,torchrun)  PARTS (lost,added,commit)
# A benchmark, not a test: the figures go in the closing note and the README.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PY=$(scripts/horovod-peer.sh | tail -1)
if ! [ -x "$BUILD_DIR/cli/hvdrun" ] || ! [ -e "$BUILD_DIR/collectives/libhvdrun.so" ]; then
  scripts/build.sh --target hvdrun --target libhvdrun >/dev/null
fi
export HVDRUN_LIBRARY=$PWD/$BUILD_DIR/collectives/libhvdrun.so
# hvdrun runs the loop on Debian's python3 (the peer venv's torch, without Horovod: there
# `import horovod.torch` is hvdrun's shim) with the package from this tree.
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
# Neither launcher inherits an enclosing job.
for v in $(compgen -e); do
  case $v in HOROVOD_* | HVDRUN_RENDEZVOUS* | HVDRUN_SECRET*) unset "$v" ;; esac
done
echo "bench-elastic: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores), $("$PY" -c 'import horovod, torch; print("Horovod", horovod.__version__, "torch", torch.__version__)')"
"$PY" bench/elastic_bench.py --hvdrun "$PWD/$BUILD_DIR/cli/hvdrun" --horovodrun "$(dirname "$PY")/horovodrun" \
  --python "$PY" --rounds "${ROUNDS:-3}" --tools "${TOOLS:-hvdrun,horovodrun,torchrun}" --parts "${PARTS:-lost,added,commit}"
echo "bench-elastic: load after $(cut -d' ' -f1-3 /proc/loadavg)"
