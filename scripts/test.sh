#!/usr/bin/env bash
# Sets up everything the tests need (installing what is missing) and runs every test:
# unit tests in an AddressSanitizer + UndefinedBehaviorSanitizer build, the checks against real
# PyTorch on CPU, clang-format and clang-tidy.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
cmake --preset dev > /dev/null
cmake --build --preset dev -j "$(nproc)"
ctest --preset dev -j "$(nproc)"
