#!/usr/bin/env bash
# The measured peer: a venv holding the real Horovod 0.28.1 (PyTorch + Gloo; no MPI,
# TensorFlow, MXNet, CUDA or NCCL), made once and then reused. Prints the venv's python as
# its last line, so callers do  PY=$(scripts/horovod-peer.sh | tail -1).
#
#   HVDRUN_PEER_DIR   where the venv lives (default $HOME/.cache/hvdrun/peers)
#   HVDRUN_PEER_JOBS  parallel compile jobs for the first build (default 2)
#   HVDRUN_PEER_LOG   the first build's log (default $HVDRUN_PEER_DIR/horovod-0.28.1-build.log)
#
# The venv is made with `/usr/bin/python3 -m venv --system-site-packages` over Debian's
# python3-torch 1.13 (+ libtorch-dev and pybind11-dev for the headers; scripts/install-deps.sh), which
# Horovod 0.28.1 supports: no 2.5 GB of PyTorch wheels. The system Python is only read.
# Horovod is built from the sdist on the package index; a failed build fails this script
# (non-zero exit and the log's tail), it never falls back to anything.
set -euo pipefail
HOROVOD_VERSION=0.28.1
PEER_DIR=${HVDRUN_PEER_DIR:-$HOME/.cache/hvdrun/peers}
VENV=$PEER_DIR/horovod-$HOROVOD_VERSION-debtorch
LOG=${HVDRUN_PEER_LOG:-$PEER_DIR/horovod-$HOROVOD_VERSION-build.log}
JOBS=${HVDRUN_PEER_JOBS:-2}
# What the venv was made from: a different key (another Horovod, another Debian torch or
# pins) remakes it.
PINS="horovod==$HOROVOD_VERSION cloudpickle==3.1.1"

say() { echo "horovod-peer: $*" >&2; }

# The key names the Debian packages by version (a cheap check on every call; importing
# torch only when building).
deb() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none; }
KEY="$PINS python3-torch=$(deb python3-torch) libtorch-dev=$(deb libtorch-dev) python=$(/usr/bin/python3 -c 'import platform; print(platform.python_version())')"

ready() {
  [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.hvdrun-peer" 2>/dev/null)" = "$KEY" ]
}

mkdir -p "$PEER_DIR"
if ! ready; then
  # One build at a time per directory (parallel test runs wait for the first one).
  exec 9>"$PEER_DIR/.lock"
  flock 9
fi
if ! ready; then
  torch_version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) || {
    say "Debian's python3-torch is not importable by /usr/bin/python3 (run scripts/install-deps.sh)"; exit 1; }
  if ! [ -f /usr/lib/python3/dist-packages/torch/include/torch/extension.h ] || ! [ -f /usr/include/pybind11/pybind11.h ]; then
    say "PyTorch's C++ headers are missing (libtorch-dev, pybind11-dev: run scripts/install-deps.sh)"; exit 1
  fi
  say "building Horovod $HOROVOD_VERSION (PyTorch $torch_version from Debian, Gloo, CPU only) into $VENV"
  say "this takes a while on a small machine (see README); log: $LOG"
  start=$(date +%s)
  rm -rf "$VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  # CPU only: no GPU operations, no NVTX ranges (found in /usr/local/include with CUDA), and CMake must not enable CUDA just because nvcc exists
  # (Horovod's CMakeLists enables the CUDA language whenever it finds a toolkit, even
  # with no GPU operation asked for). The toolchain file (read by CMake from the
  # environment) marks the CUDA compiler as absent and skips the toolkit search.
  tc=$(mktemp --suffix=.cmake)
  trap 'rm -f "$tc"' EXIT
  cat >"$tc" <<'EOF'
set(CMAKE_CUDA_COMPILER NOTFOUND CACHE FILEPATH "no CUDA: the peer is CPU only" FORCE)
set(CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit TRUE)
set(CMAKE_DISABLE_FIND_PACKAGE_NCCL TRUE)
EOF
  path=$(tr ':' '\n' <<<"$PATH" | grep -v -i cuda | paste -sd: -)
  # shellcheck disable=SC2086 # $PINS is a list of requirements
  if ! env -u HOROVOD_GPU -u HOROVOD_GPU_OPERATIONS -u HOROVOD_GPU_ALLREDUCE -u HOROVOD_GPU_ALLGATHER \
      -u HOROVOD_GPU_BROADCAST -u HOROVOD_GPU_ALLTOALL -u HOROVOD_GPU_REDUCESCATTER -u HOROVOD_CUDA_HOME \
      -u CUDA_HOME -u CUDA_PATH -u CUDACXX -u PYTHONPATH \
      PATH="$path" CMAKE_TOOLCHAIN_FILE="$tc" MAKEFLAGS="-j$JOBS" \
      HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_NVTX=1 \
      CCACHE_BASEDIR="${TMPDIR:-/tmp}" CCACHE_NOHASHDIR=true \
      nice -n 10 "$VENV/bin/pip" install --disable-pip-version-check --no-cache-dir \
        --no-build-isolation --use-pep517 --no-binary horovod -v $PINS >"$LOG" 2>&1; then
    tail -40 "$LOG" >&2
    say "building Horovod $HOROVOD_VERSION failed (full log: $LOG)"
    exit 1
  fi
  # What was built must be what was asked for: Gloo and PyTorch, no MPI, NCCL or CUDA.
  if ! "$VENV/bin/python" - >>"$LOG" 2>&1 <<'PY'
import horovod.torch as hvd
got = dict(gloo=hvd.gloo_built(), mpi=hvd.mpi_built(), nccl=hvd.nccl_built(), cuda=hvd.cuda_built())
print("horovod-peer: built", got)
assert got == dict(gloo=True, mpi=False, nccl=False, cuda=False), got
PY
  then
    tail -20 "$LOG" >&2
    say "the Horovod build in $VENV is not PyTorch + Gloo + CPU only (log: $LOG)"
    exit 1
  fi
  echo "$KEY" >"$VENV/.hvdrun-peer"
  say "built in $(( $(date +%s) - start )) s"
fi
echo "$VENV/bin/python"
