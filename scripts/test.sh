#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test (ctest), then
# the runtime and launcher tests again under AddressSanitizer/UBSan and ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# The time of each phase, one line each, printed at the end and when a phase fails (the
# split among ctest's labels, package included, is ctest's own "Label Time Summary").
phase_times=() phase_name='' phase_start=$SECONDS
phase() {  # phase NAME: the phase before it ends, NAME starts
  [ -z "$phase_name" ] || phase_times+=("$(printf '%6d s  %s' $((SECONDS - phase_start)) "$phase_name")")
  phase_name=$1 phase_start=$SECONDS
}
phase_summary() {
  local rc=$?
  [ "$rc" = 0 ] || phase_name="$phase_name (FAILED, exit $rc)"
  phase ''
  echo "== test.sh: time per phase (${SECONDS} s in all)"
  printf '%s\n' "${phase_times[@]}"
}
trap phase_summary EXIT
phase install-deps
scripts/install-deps.sh
# ccache for every build of this run, even with no cache kept from run to run: the builds
# that compile the libraries again with the main build's flags (the .deb's, pip's) then take
# its objects. Their build directories sit at the main build's depth (build-deb,
# build-pip-<tag>), so that with CCACHE_BASEDIR their compile commands are the same.
if command -v ccache >/dev/null && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
fi
phase 'main build'
scripts/build.sh
phase 'main ctest'
(cd build && ctest --output-on-failure --no-tests=error -j2 --timeout 300)
# The Python package (hvdrun.torch, hvdrun.numpy): pytest on Debian's python3-torch and on
# PyTorch 2.x from PyPI in a cached venv, against cmake-installed and pip-installed hvdrun.
phase python
scripts/test-python.sh
# A real Horovod 0.28.1 PyTorch program under hvdrun --horovod against horovodrun --gloo, on
# this host and on test-cluster hosts (scripts/horovod-peer.sh builds Horovod into a cached
# venv the first time: about 6 min on 2 cores; a failed build fails the suite).
phase horovod
scripts/test-horovod.sh
if [ "${HVDRUN_SKIP_SANITIZERS:-0}" != 1 ]; then
  # ctest labels: "runtime" = in-process tests (parsers, rendezvous, ring collectives),
  # "process" = the real hvdrun with real workers, "gpu" = device collectives (skipped
  # without a GPU), "cluster" = jobs across netns sshd hosts (root), "chaos" = 500 seeded
  # fault trials (tests/chaos/chaos, ~5 min; in the main build above only), "package" = the
  # .deb (compiled once) on an mmdebstrap Debian 12 root and the image made from that .deb
  # as two cluster nodes (in the main build only; the roots are made once under
  # ~/.cache/hvdrun/). ASan/UBSan and
  # TSan run all but gpu and chaos. The sanitizer builds are
  # the builds without CUDA (HVDRUN_WITH_CUDA=OFF); the main build takes CUDA and NCCL when
  # they are installed: CI builds both ways.
  # Each builds only what those labels run (the target tests_runtime_process_cluster: no
  # examples, no Slurm test), checked against the main build's list of their tests.
  labels='runtime|process|cluster'
  for kind in address thread; do
    phase "$kind build"
    # -g1: the line tables that the sanitizers' stack traces need (file:line), without the
    # variables' debug information (-g), which costs 15-40% more CPU time per file here.
    BUILD_DIR=build-$kind BUILD_TYPE=RelWithDebInfo scripts/build.sh -DHVDRUN_SANITIZE=$kind -DHVDRUN_BUILD_BENCH=OFF -DHVDRUN_WITH_CUDA=OFF \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
      --target tests_runtime_process_cluster
    scripts/check-test-targets.sh build build-$kind "$labels"
    phase "$kind ctest"
    (cd build-$kind && ctest --output-on-failure --no-tests=error -j2 --timeout 300 -L "$labels")
  done
fi
# Every parser of outside input under libFuzzer (clang, ASan + UBSan), a fixed time each
# from its checked-in seed corpus (about 1.5 min in all).
phase 'fuzz build and run'
scripts/fuzz.sh
phase ''
echo "test.sh: all tests passed"
