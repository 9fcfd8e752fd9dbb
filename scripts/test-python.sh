#!/usr/bin/env bash
# The Python package's tests (pytest, tests/python), once per interpreter, each against an
# installed hvdrun, the two ways users install it:
#   1. Debian's /usr/bin/python3 with python3-torch: `cmake --install` into a prefix
#      ($BUILD_DIR/_pyprefix), the package found through PYTHONPATH (Debian's layout).
#   2. PyTorch 2.x from PyPI in a venv made once and reused ($HVDRUN_TORCH2_VENV, default
#      $HOME/.cache/hvdrun/torch2, outside the checkout): `pip install .` into it, and
#      `pip wheel .` checked for its contents.
# Needs a full build in $BUILD_DIR (scripts/build.sh). HVDRUN_PYTHON_ONLY=debian|venv runs one.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ONLY=${HVDRUN_PYTHON_ONLY:-}
# pytest's own lines are the verdict; -p no:cacheprovider keeps the checkout clean.
PYTEST_ARGS=(-q -p no:cacheprovider tests/python "$@")

if [ "$ONLY" != venv ]; then
  prefix=$PWD/$BUILD_DIR/_pyprefix
  rm -rf "$prefix"
  cmake --install "$BUILD_DIR" --prefix "$prefix" >/dev/null
  pkg=$(cd "$prefix" && ls -d lib/python3*/dist-packages/hvdrun | head -1)
  echo "test-python: /usr/bin/python3 ($(/usr/bin/python3 -c 'import torch; print("torch", torch.__version__)')), cmake --install, PYTHONPATH=$prefix/${pkg%/hvdrun}"
  env -u HVDRUN_LIBRARY PYTHONPATH="$prefix/${pkg%/hvdrun}" HVDRUN_BIN="$prefix/bin/hvdrun" \
    HVDRUN_EXPECT_LIBRARY_UNDER="$prefix" /usr/bin/python3 -m pytest "${PYTEST_ARGS[@]}"
fi

if [ "$ONLY" != debian ]; then
  VENV=${HVDRUN_TORCH2_VENV:-$HOME/.cache/hvdrun/torch2}
  # Pinned: a current PyTorch 2.x (the seed's scripts use 2.6; any 2.x from 1.13 on works).
  PINS="torch==2.15.0 numpy==2.4.6 pytest==9.2.0 scikit-build-core==1.1.2"
  if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.hvdrun-pins" 2>/dev/null)" != "$PINS" ]; then
    echo "test-python: preparing $VENV ($PINS)"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check $PINS
    echo "$PINS" >"$VENV/.hvdrun-pins"
  fi
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  if command -v ccache >/dev/null; then
    export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  fi
  # The venv already holds the build backend: no download per install.
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall .
  rm -rf "$BUILD_DIR/wheels"
  "$VENV/bin/pip" wheel -q --disable-pip-version-check --no-build-isolation --no-deps -w "$BUILD_DIR/wheels" .
  "$VENV/bin/python" - "$BUILD_DIR"/wheels/hvdrun-*.whl <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["hvdrun/__init__.py", "hvdrun/torch/__init__.py", "hvdrun/numpy.py", "hvdrun/py.typed"]
need_like = ["hvdrun/lib/libhvdrun.so", ".data/scripts/hvdrun", ".data/data/share/hvdrun/horovod-compat/horovod/torch/__init__.py"]
missing = [n for n in need if n not in names] + [n for n in need_like if not any(x.endswith(n) or n in x for x in names)]
if missing:
    sys.exit(f"test-python: the wheel {sys.argv[1]} lacks {missing}")
print(f"test-python: wheel {sys.argv[1].split('/')[-1]}: {len(names)} files, hvdrun, libhvdrun and the package in it")
PY
  echo "test-python: $VENV/bin/python ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)')), pip install ."
  env -u HVDRUN_LIBRARY -u PYTHONPATH HVDRUN_BIN="$VENV/bin/hvdrun" HVDRUN_EXPECT_LIBRARY_UNDER="$VENV" \
    "$VENV/bin/python" -m pytest "${PYTEST_ARGS[@]}"
fi
