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
source scripts/lib/python-installs.sh
BUILD_DIR=${BUILD_DIR:-build}
ONLY=${HVDRUN_PYTHON_ONLY:-}
# pytest's own lines are the verdict; -p no:cacheprovider keeps the checkout clean.
PYTEST_ARGS=(-q -p no:cacheprovider tests/python "$@")

if [ "$ONLY" != venv ]; then
  prefix=$PWD/$BUILD_DIR/_pyprefix
  site=$(hvdrun_prefix_install "$BUILD_DIR" "$prefix")
  echo "test-python: /usr/bin/python3 ($(/usr/bin/python3 -c 'import torch; print("torch", torch.__version__)')), cmake --install, PYTHONPATH=$site"
  env -u HVDRUN_LIBRARY PYTHONPATH="$site" HVDRUN_BIN="$prefix/bin/hvdrun" \
    HVDRUN_EXPECT_LIBRARY_UNDER="$prefix" /usr/bin/python3 -m pytest "${PYTEST_ARGS[@]}"
fi

if [ "$ONLY" != debian ]; then
  VENV=$(hvdrun_torch2_venv)
  hvdrun_pip_install "$VENV"
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
