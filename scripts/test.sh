#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds, and runs every test: GoogleTest through CTest, then
# pytest. On a machine without a GPU the GPU tests are reported as skipped, not passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

echo "== C++ tests (CTest) =="
ctest --test-dir build/python --output-on-failure -j "$(nproc)"
echo "== Python tests (pytest) =="
python -m pytest -q -rs tests/python
