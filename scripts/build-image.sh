#!/usr/bin/env bash
# Builds the hvdrun image (docker/Dockerfile) here with buildah (--isolation chroot: no
# container runtime needed), on a Debian 12 base with python3-torch made with mmdebstrap and
# imported (no image registry is needed). The base's tarball is cached under
# ~/.cache/hvdrun/ and the base image kept in buildah's storage; both are made once.
#   IMAGE (default localhost/hvdrun:latest) names the image; prints its size.
# --deb FILE: install that package (scripts/package-deb.sh's, made on Debian 12) instead of
# compiling hvdrun again: a build context named `build` holding dist/FILE stands in for the
# Dockerfile's build stage, which buildah then skips.
set -euo pipefail
deb=
if [ "${1:-}" = --deb ]; then deb=$(realpath "$2"); [ -f "$deb" ] || { echo "build-image: no package at $2" >&2; exit 1; }; fi
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/hvdrun:latest}
BASE_IMAGE=localhost/hvdrun-base:debian12-torch
MIRROR=${HVDRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${HVDRUN_CACHE_DIR:-$HOME/.cache/hvdrun}
base_tar=$cache/debian12-torch-root.tar
if ! buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  if [ ! -s "$base_tar" ]; then
    mkdir -p "$cache"
    echo "build-image: making the Debian 12 + python3-torch base with mmdebstrap (once; $base_tar)"
    mmdebstrap --variant=apt --format=tar --include=python3-torch,python3-numpy,ca-certificates \
      bookworm "$base_tar.part.tar" "$MIRROR"
    mv "$base_tar.part.tar" "$base_tar"
  fi
  ctr=$(buildah from scratch)
  buildah add -q "$ctr" "$base_tar" / >/dev/null
  buildah config --cmd /bin/bash "$ctr"
  buildah commit -q "$ctr" "$BASE_IMAGE" >/dev/null
  buildah rm "$ctr" >/dev/null
fi
from=()
if [ -n "$deb" ]; then
  stage=$(mktemp -d /tmp/hvdrun-image-deb.XXXXXX)
  trap 'rm -rf "$stage"' EXIT
  mkdir "$stage/dist" && cp "$deb" "$stage/dist/"
  from=(--build-context build="$stage")
fi
buildah build --isolation chroot --layers --build-arg BASE="$BASE_IMAGE" "${from[@]}" -f docker/Dockerfile -t "$IMAGE" .
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$IMAGE"
