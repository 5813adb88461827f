#!/usr/bin/env bash
# Sets trainfit up on a fresh Debian machine (installing what is missing), builds the release
# binary, and runs it on a built-in example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake --preset release > /dev/null
cmake --build --preset release -j "$(nproc)"
echo
echo "$ build/release/trainfit estimate --model resnet50 --batch 64 --gpu rtx4090"
build/release/trainfit estimate --model resnet50 --batch 64 --gpu rtx4090
