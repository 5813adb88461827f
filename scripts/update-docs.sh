#!/usr/bin/env bash
# Rewrites what the documentation shows from what trainfit prints: the output of every example in
# README.md and docs/ (scripts/docs.py examples --update) and docs/options.md from the option
# table. Read the diff before committing it: a figure that moved should move on purpose.
#   scripts/update-docs.sh [BUILD_DIR]     (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/release}"
/usr/bin/python3 scripts/docs.py examples --trainfit "$build/trainfit" --update
TRAINFIT_BUILD="$build" /usr/bin/python3 scripts/docs.py options --update
/usr/bin/python3 scripts/docs.py links
git --no-pager diff --stat -- README.md docs
