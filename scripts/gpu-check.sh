#!/usr/bin/env bash
# The GPU check: the `gpu` tests and the NCCL-path benchmark, one rank per GPU.
#
#   scripts/gpu-check.sh --prepare   here, where the -dev packages are: builds with
#                                    HVDRUN_WITH_CUDA=ON into build-gpu/ and gathers what
#                                    the check runs into build-gpu-carry/ (binaries and the
#                                    shared libraries a bare machine lacks)
#   scripts/gpu-check.sh             on the GPU machine (CUDA, NCCL, driver; no -dev
#                                    packages), from the repository root, with
#                                    build-gpu-carry/ carried there
#
# Fails when no GPU is visible, when a `gpu` test fails or is skipped, or when the
# benchmark fails. It finishes in a few minutes (budget: under 8).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=build-gpu-carry

if [ "${1:-}" = --prepare ]; then
  BUILD_DIR=build-gpu scripts/build.sh -DHVDRUN_WITH_CUDA=ON -DHVDRUN_BUILD_TESTS=ON -DHVDRUN_BUILD_BENCH=ON \
    --target hvdrun --target gpu_tests --target gpu_worker --target hvdrun-nccl-bench
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib"
  cp build-gpu/cli/hvdrun build-gpu/tests/gpu_tests build-gpu/tests/gpu_worker build-gpu/bench/hvdrun-nccl-bench "$CARRY/"
  cp -L build-gpu/collectives/libhvdrun.so.0 "$CARRY/lib/"
  # Shared libraries outside glibc, the driver and NCCL (which the GPU machine has).
  for f in "$CARRY"/hvdrun "$CARRY"/gpu_tests "$CARRY"/gpu_worker "$CARRY"/hvdrun-nccl-bench; do
    ldd "$f" | awk '/=> \// {print $3}'
  done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libnccl|libcuda|libhvdrun)\.so' |
    while read -r lib; do cp -L "$lib" "$CARRY/lib/"; done
  du -sh "$CARRY"
  echo "gpu-check: prepared $CARRY/ (carry it to the GPU machine and run scripts/gpu-check.sh there)"
  exit 0
fi

[ -x "$CARRY/gpu_tests" ] || { echo "gpu-check: $CARRY/ is missing: run 'scripts/gpu-check.sh --prepare' first" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader ||
  { echo "gpu-check: nvidia-smi failed: no NVIDIA GPU or driver here" >&2; exit 1; }
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
# NCCL: the system's if the loader finds it, else the one that came with PyTorch.
NCCL_DIRS=
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2' && [ ! -e /usr/local/cuda/lib/libnccl.so.2 ] &&
   [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  for py in python3 /usr/bin/python3; do
    d=$($py -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null) &&
      { NCCL_DIRS=$d; break; }
  done
fi
export LD_LIBRARY_PATH="$PWD/$CARRY/lib:/usr/local/cuda/lib:/usr/local/cuda/lib64${NCCL_DIRS:+:$NCCL_DIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HVDRUN_TEST_HVDRUN="$PWD/$CARRY/hvdrun" HVDRUN_TEST_GPU_WORKER="$PWD/$CARRY/gpu_worker"
echo "gpu-check: $GPUS GPU(s); NCCL from ${NCCL_DIRS:-the system}"

log=$(mktemp)
timeout 300 "$CARRY/gpu_tests" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" != 0 ]; then echo "gpu-check: gpu tests failed (exit $status)" >&2; exit 1; fi
if grep -q '^\[  SKIPPED \]' "$log" && ! { [ "$GPUS" = 1 ] && [ "$(grep -c '^\[  SKIPPED \]' "$log")" = 1 ] &&
                                         grep -q 'needs 2 GPUs' "$log"; }; then
  echo "gpu-check: gpu tests were skipped on a machine with $GPUS GPU(s): see above" >&2
  exit 1
fi
timeout 300 "$CARRY/hvdrun" -np "$GPUS" "$CARRY/hvdrun-nccl-bench" -b 1M -e 1G -t "${GPU_BENCH_SECONDS:-0.4}"
echo "gpu-check: done"
