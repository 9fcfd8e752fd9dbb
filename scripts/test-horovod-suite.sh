#!/usr/bin/env bash
# Horovod's own PyTorch tests against hvdrun.torch: scripts/test-horovod-suite.sh HOROVOD_SRC
# runs HOROVOD_SRC/test/parallel/test_torch.py (and test_process_sets_static.py, whose
# `import horovod.tensorflow` is read as horovod.torch: nothing else in it is TensorFlow's)
# from a copy in a temporary directory, each test as its own
# `hvdrun --horovod-compat -np N python -m pytest FILE::Class::test` job (a test that fails
# on one rank leaves the others waiting in the next one under any launcher), killed and
# counted as hung after $HVDRUN_SUITE_TIMEOUT seconds (also the ranks' --start-timeout: a
# loaded machine takes long to import torch and collect the tests before hvd.init). For each
# interpreter and rank count: the counts of passed/failed/skipped/hung/upstream (failed or
# hung here and on Horovod's own Gloo build alike: UPSTREAM in scripts/lib/horovod_suite.py;
# or, with a recent torch, in the test itself whatever runs it: UPSTREAM_WITH_TORCH),
# then each failure, hang, upstream and skip with a one-line reason, then the passed names;
# each verdict is also kept in
# $HVDRUN_SUITE_RESULTS/<python>-np<N>/<test id> (a failed or hung test's last 30 lines of
# output beside it, in <test id>.log).
#   interpreters ($HVDRUN_SUITE_PYTHONS, default "debian venv"): Debian's /usr/bin/python3
#   (its torch 1.13) with hvdrun `cmake --install`ed from $BUILD_DIR, and the PyPI torch 2.x
#   venv of scripts/test-python.sh with hvdrun `pip install`ed into it.
# $HVDRUN_SUITE_RANKS (default "2 3"), $HVDRUN_SUITE_JOBS jobs at once (default 2),
# $HVDRUN_SUITE_FILTER: a grep -E pattern on the test ids; $HVDRUN_SUITE_PREFIX: an existing
# `cmake --install` prefix for Debian's python (none is made); HVDRUN_SUITE_VENV_PREFIX=1
# gives the venv the `cmake --install`ed package on PYTHONPATH instead of a `pip install`
# (faster while iterating). Needs a full build in $BUILD_DIR.
# A subset: HVDRUN_SUITE_FILTER='process_set|join' (jobs at once are safe: each hvdrun takes
# its own ports). Exit status 1 when a test failed or hung. Never modifies HOROVOD_SRC.
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1/test/parallel/test_torch.py" ] ||
  { echo "usage: $0 HOROVOD_SRC (a Horovod checkout with test/parallel/test_torch.py)" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
source scripts/lib/python-installs.sh
BUILD_DIR=${BUILD_DIR:-build}
PYTHONS=${HVDRUN_SUITE_PYTHONS:-debian venv}
RANKS=${HVDRUN_SUITE_RANKS:-2 3}
JOBS=${HVDRUN_SUITE_JOBS:-2}
FILTER=${HVDRUN_SUITE_FILTER:-.}
export HVDRUN_SUITE_TIMEOUT=${HVDRUN_SUITE_TIMEOUT:-150}
RESULTS=$(mkdir -p "${HVDRUN_SUITE_RESULTS:-$BUILD_DIR/horovod-suite}" && cd "${HVDRUN_SUITE_RESULTS:-$BUILD_DIR/horovod-suite}" && pwd)
HELPER=$PWD/scripts/lib/horovod_suite.py

tmp=$(mktemp -d /tmp/hvdrun-suite.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/test"
cp -r "$SRC/test/parallel" "$SRC/test/utils" "$tmp/test/"
chmod -R u+w "$tmp/test"
sed -i 's/^import horovod\.tensorflow as hvd$/import horovod.torch as hvd/' "$tmp/test/parallel/test_process_sets_static.py"
python3 "$HELPER" stdlib-only "$tmp/test/utils/common.py"
cp scripts/lib/horovod_suite_conftest.py "$tmp/test/parallel/conftest.py"
FILES=(test_torch.py test_process_sets_static.py)
mapfile -t TESTS < <(cd "$tmp/test/parallel" && python3 "$HELPER" list "${FILES[@]}" | grep -E -- "$FILTER" || true)
[ ${#TESTS[@]} -gt 0 ] || { echo "test-horovod-suite: no test matches '$FILTER'" >&2; exit 2; }

# One test as one job: $1 python, $2 hvdrun, $3 ranks, $4 result dir, $5 test id (env: PYTHONPATH).
run_one() {
  local py=$1 hvdrun=$2 np=$3 res=$4 id=$5 out rc=0
  out=$(mktemp -d "$tmp/job.XXXXXX")
  # Each job in its own directory: files a test leaves in its working directory (timelines)
  # do not reach the next one.
  (cd "$out" && HVDRUN_SUITE_OUT=$out timeout -k 10 "$HVDRUN_SUITE_TIMEOUT" "$hvdrun" --horovod-compat \
    --start-timeout "$HVDRUN_SUITE_TIMEOUT" -np "$np" "$py" -m pytest -q -p no:cacheprovider --rootdir "$tmp/test/parallel" "$tmp/test/parallel/$id") \
    >"$out/log" 2>&1 || rc=$?
  python3 "$HELPER" verdict "$out" "$np" "$rc" >"$res/$id"
  case $(cut -d' ' -f1 "$res/$id") in  # a failure's or hang's last output is kept beside it
    passed|skipped) ;;
    *) tail -n 30 "$out/log" >"$res/$id.log" ;;
  esac
  rm -rf "$out"
}
export -f run_one
export tmp HELPER

# Every install first (the tests then run on what the checkout held when the script started).
declare -A PY HVDRUN PYPATH
for which in $PYTHONS; do
  case $which in
    debian)
      prefix=${HVDRUN_SUITE_PREFIX:-$PWD/$BUILD_DIR/_suiteprefix}
      if [ -n "${HVDRUN_SUITE_PREFIX:-}" ]; then
        PYPATH[$which]=$(cd "$prefix" && pwd)/$(cd "$prefix" && ls -d lib/python3*/dist-packages | head -1)
      else
        PYPATH[$which]=$(hvdrun_prefix_install "$BUILD_DIR" "$prefix")
      fi
      PY[$which]=/usr/bin/python3 HVDRUN[$which]=$prefix/bin/hvdrun ;;
    venv)
      venv=$(hvdrun_torch2_venv)
      PY[$which]=$venv/bin/python HVDRUN[$which]=$venv/bin/hvdrun PYPATH[$which]=
      if [ -n "${HVDRUN_SUITE_VENV_PREFIX:-}" ]; then  # faster while iterating: the Debian install's package
        PYPATH[$which]=$(hvdrun_prefix_install "$BUILD_DIR" "$PWD/$BUILD_DIR/_suitevenvprefix")
        HVDRUN[$which]=$PWD/$BUILD_DIR/_suitevenvprefix/bin/hvdrun
      else
        hvdrun_pip_install "$venv"
      fi ;;
    *) echo "test-horovod-suite: unknown interpreter '$which' (debian or venv)" >&2; exit 2 ;;
  esac
done
echo "test-horovod-suite: installed; ${#TESTS[@]} tests per configuration"

status=0
for which in $PYTHONS; do
  py=${PY[$which]} hvdrun=${HVDRUN[$which]} pypath=${PYPATH[$which]}
  torch_version=$("$py" -c 'import torch; print(torch.__version__)')
  label="$which (torch $torch_version)"
  for np in $RANKS; do
    res=$RESULTS/$which-np$np
    rm -rf "$res" && mkdir -p "$res"
    printf '%s\n' "${TESTS[@]}" | env -u HVDRUN_LIBRARY PYTHONPATH="$pypath" nice -n 10 \
      xargs -d '\n' -P "$JOBS" -I{} bash -c 'run_one "$@"' _ "$py" "$hvdrun" "$np" "$res" {}
    python3 "$HELPER" summary "$res" "$label, $np ranks" "$torch_version" || status=1
  done
done
exit $status
