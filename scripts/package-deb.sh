#!/usr/bin/env bash
# Makes dist/hvdrun_<version>_<arch>.deb with CPack: hvdrun, libhvdrun (soname and links),
# the header, CMake package and pkg-config file, the man page, the Python package (in
# /usr/lib/python3/dist-packages), the horovod shim and bash and zsh completion; dependencies from
# the binaries (dpkg-shlibdeps). Then lintian, when installed: no error allowed.
# The package is built without CUDA: Debian 12 has no NCCL; GPU nodes take the image.
# BUILD_DIR (default build-deb) and DIST (default dist) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-deb}
DIST=$(realpath -m "${DIST:-dist}")
export BUILD_DIR SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
scripts/build.sh -DHVDRUN_PACKAGE_DEB=ON -DCMAKE_INSTALL_PREFIX=/usr -DHVDRUN_PYTHON_INSTALL_DIR=lib/python3/dist-packages \
  -DCMAKE_SKIP_INSTALL_RPATH=ON -DHVDRUN_BUILD_TESTS=OFF -DHVDRUN_BUILD_BENCH=OFF -DHVDRUN_WITH_CUDA=OFF "$@"
mkdir -p "$DIST"
(cd "$BUILD_DIR" && cpack -G DEB -B "$DIST" >/dev/null)
rm -rf "$DIST/_CPack_Packages"
deb=$(ls -t "$DIST"/hvdrun_*.deb | head -1)
echo "package-deb: $deb ($(du -k "$deb" | cut -f1) KiB)"
if command -v lintian >/dev/null; then
  lintian --fail-on error "$deb"
else
  echo "package-deb: lintian is not installed: not checked (scripts/install-deps.sh installs it)"
fi
