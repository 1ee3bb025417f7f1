#!/usr/bin/env bash
# Install genenv_pl into the active Python environment. The constraints file pins torch to the
# CPU build (an open torch range would pull a multi-GB CUDA build); on a GPU node, install your
# CUDA torch first and drop `-c constraints.txt`.
#   bash scripts/install.sh        # the package
#   bash scripts/install.sh test   # plus what the test suite needs
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -c constraints.txt -e ".${1:+[$1]}"
if [[ "${1:-}" == test ]]; then
  # bfcl-eval ships BFCL's own checkers, which the tests compare our scorer against; its
  # declared dependencies (vendor SDKs) are not needed for that.
  python -m pip install -q --no-deps bfcl-eval==2026.3.23
fi
