#!/usr/bin/env bash
# Installs real Helm for the chart tests: Helm's Go library, shipped for this machine in the
# PyPI wheel `helm-sdkpy`, in a virtual environment at target/tools/helm. Its metadata asks
# for Python 3.12; on 3.11 it imports and runs all the same (--ignore-requires-python).
# Quick when already installed. crates/kopper/tests/e2e/chart.rs drives it via
# scripts/helm_driver.py.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/tools/helm
version=0.1.32
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import helm_sdkpy" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --ignore-requires-python "helm-sdkpy==$version" pyyaml
"$venv/bin/python" -c "import helm_sdkpy; print('helm-sdkpy', helm_sdkpy.__version__)"
