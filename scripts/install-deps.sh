#!/usr/bin/env bash
# Installs the Debian 12 packages hvdrun needs to build, test and benchmark, when missing.
set -euo pipefail
pkgs=(cmake g++ clang libclang-rt-14-dev make pkg-config libboost-dev libssh-dev libcli11-dev libspdlog-dev
      nlohmann-json3-dev libyaml-cpp-dev libssl-dev googletest libgtest-dev libbenchmark-dev
      openssh-server iproute2 procps man-db openmpi-bin libopenmpi-dev python3-torch python3-numpy python3-matplotlib
      slurmctld slurmd slurm-client python3-pytest python3-venv python3-torchvision ccache ninja-build
      libtorch-dev pybind11-dev
      lintian mmdebstrap bash-completion zsh buildah)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
