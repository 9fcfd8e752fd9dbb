# Sourced by scripts/test-python.sh and scripts/test-horovod-suite.sh: the two ways users
# install hvdrun's Python package, each made here the one way.

# `cmake --install $1` into the prefix $2 (emptied first); prints the directory to put on
# PYTHONPATH (Debian's dist-packages layout).
hvdrun_prefix_install() {
  local build=$1 prefix=$2 pkg
  rm -rf "$prefix"
  cmake --install "$build" --prefix "$prefix" >/dev/null
  pkg=$(cd "$prefix" && ls -d lib/python3*/dist-packages/hvdrun | head -1)
  echo "$prefix/${pkg%/hvdrun}"
}

# The PyPI torch 2.x venv, made once and reused ($HVDRUN_TORCH2_VENV, default
# $HOME/.cache/hvdrun/torch2, outside the checkout); prints its path.
hvdrun_torch2_venv() {
  local venv=${HVDRUN_TORCH2_VENV:-$HOME/.cache/hvdrun/torch2}
  # Pinned: a current PyTorch 2.x (the seed's scripts use 2.6; any 2.x from 1.13 on works).
  local pins="torch==2.15.0 numpy==2.4.6 pytest==9.2.0 scikit-build-core==1.1.2"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.hvdrun-pins" 2>/dev/null)" != "$pins" ]; then
    echo "preparing $venv ($pins)" >&2
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check $pins >&2
    echo "$pins" >"$venv/.hvdrun-pins"
  fi
  echo "$venv"
}

# `pip install .` (the checkout in the current directory) into the venv $1.
hvdrun_pip_install() {
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  if command -v ccache >/dev/null; then
    export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  fi
  # The venv already holds the build backend: no download per install.
  "$1/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall .
}
