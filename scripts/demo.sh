#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds, and runs the demo: every tilegrid operator on the GPU
# when there is one, else on the CPU, with its error against a float64 reference and its time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
python examples/demo.py "$@"
