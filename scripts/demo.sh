#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds, and runs the demo: every tilegrid operator on the GPU
# when there is one, else on the CPU, with its error against a float64 reference and its time.
# The grid part voxelizes a real scanned model, fetched once by scripts/fetch_models.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
scripts/fetch_models.sh >/dev/null || echo "demo: continuing without the model file"
python examples/demo.py "$@"
