#!/usr/bin/env bash
# The first command: installs the packages that are missing, builds only what the job needs
# (hvdrun, libhvdrun, the Python package, the C demo: no tests, no benchmarks) into
# build-demo/, installs it into _install/, then runs a PyTorch training run on 4 local ranks
# (examples/pytorch_train.py: hvdrun.torch under Debian's /usr/bin/python3 and python3-torch,
# an MLP on synthetic data, on the CPU) and the C allreduce check on 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export BUILD_DIR=${BUILD_DIR:-build-demo}
# Ninja (install-deps.sh installs it) compiles a library's files before the libraries it links
# are built, so both cores stay busy to the end; an existing build-demo/ keeps its generator.
if [ ! -e "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null; then export CMAKE_GENERATOR=Ninja; fi
start=$SECONDS
scripts/build.sh -DHVDRUN_BUILD_TESTS=OFF -DHVDRUN_BUILD_BENCH=OFF
cmake --install "$BUILD_DIR" --prefix "$PWD/_install" >/dev/null
echo "== built and installed into _install/ in $((SECONDS - start)) s"
pydir=$(sed -n 's/^HVDRUN_PYTHON_INSTALL_DIR:STRING=//p' "$BUILD_DIR/CMakeCache.txt")
echo "== hvdrun -np 4 python3 examples/pytorch_train.py (hvdrun.torch, CPU)"
PYTHONPATH="$PWD/_install/$pydir${PYTHONPATH:+:$PYTHONPATH}" \
  _install/bin/hvdrun -np 4 /usr/bin/python3 examples/pytorch_train.py --epochs 5 --lr 0.0001 --samples 4096 --no-cuda
echo "== hvdrun -np 4 hvdrun-allreduce-demo (the C API)"
_install/bin/hvdrun -np 4 _install/bin/hvdrun-allreduce-demo
echo "== demo done in $((SECONDS - start)) s; hvdrun is in _install/bin (hvdrun --help)"
