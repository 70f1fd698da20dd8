#!/usr/bin/env bash
# Prints a hash of the sources libtilegrid is compiled from (src/, include/, cmake/, the top
# CMakeLists.txt): a library built elsewhere is linked only where this hash matches
# (scripts/prebuild_library.sh writes it, scripts/gpu.sh checks it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
find src include cmake CMakeLists.txt -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
