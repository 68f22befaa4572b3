#!/usr/bin/env bash
# Installs sinkscope's build and test dependencies from Debian packages (Debian 12), then configures
# and builds into ./build. Safe to run again. Usage: scripts/setup.sh [--with-extras]
#   --with-extras also installs what the benchmarks' PyTorch peers use (python3-torch).
# Chromium is part of the base set: the viewer's browser tests and the HTML-report render test run
# in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config git
  libopenblas-dev libopenblas0-openmp libssl-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libsentencepiece-dev
  libopenmpi-dev openmpi-bin clang-14 libclang-rt-14-dev clang-format-14
  python3-dev pybind11-dev python3-numpy python3-pytest python3-matplotlib python3-setuptools
  python3-wheel python3-venv chromium)
if [[ "${1:-}" == "--with-extras" ]]; then
  packages+=(python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j"$(nproc)"
