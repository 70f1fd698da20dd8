#!/usr/bin/env bash
# Builds the API reference (docs/api: Sphinx, autodoc + napoleon over the docstrings) into
# build/docs/index.html. Warnings are errors (-W), all of them reported (--keep-going), so a
# docstring that does not parse or a page that names a missing object fails the build.
#
# It documents the tilegrid that Python imports: scripts/setup.sh installs it from this tree
# into .venv (with sphinx, from requirements-dev.txt), which is used when no environment is
# active.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
  # shellcheck disable=SC1091
  source .venv/bin/activate
fi
start=$(date +%s)
sphinx-build -W --keep-going -b html docs/api build/docs
echo "build_docs: build/docs/index.html in $(( $(date +%s) - start )) s"
