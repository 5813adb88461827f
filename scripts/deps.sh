#!/usr/bin/env bash
# Installs the Debian packages trainfit needs and does not find, with apt-get.
#   scripts/deps.sh build   compilers, CMake and the libraries trainfit links
#   scripts/deps.sh test    also GoogleTest, PyTorch and torchvision (CPU), Pillow (the loader
#                           checks decode JPEGs), Chromium (opens the HTML reports headless),
#                           clang-format, clang-tidy, pyflakes and mypy, venv, pip, setuptools
#                           and wheel (`pip install .` is tested in a fresh virtual environment)
set -euo pipefail

packages=(g++ cmake make libfmt-dev nlohmann-json3-dev libcli11-dev libbenchmark-dev pybind11-dev python3-dev)
if [ "${1:-build}" = test ]; then
  packages+=(libgtest-dev python3-torch python3-torchvision python3-pil chromium clang-format clang-tidy pyflakes3
             mypy python3-venv python3-pip python3-setuptools python3-wheel)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "trainfit: installing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
