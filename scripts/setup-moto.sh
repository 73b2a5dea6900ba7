#!/usr/bin/env bash
# Installs moto in server mode (a real S3 and IAM API on loopback) for the Bucket tests, in a
# virtual environment at target/tools/moto. Quick when already installed.
# crates/kopper/tests/e2e/bucket.rs starts one `moto_server` per test.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/tools/moto
version=5.2.5
if [ -x "$venv/bin/moto_server" ] && "$venv/bin/python" -c "import moto; assert moto.__version__ == '$version'" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$version"
"$venv/bin/python" -c "import moto; print('moto', moto.__version__)"
