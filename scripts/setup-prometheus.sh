#!/usr/bin/env bash
# Installs Prometheus and promtool (Debian's `prometheus` package) for the observability tests
# (crates/kopper/tests/e2e/observability.rs). Quick when they are already there. Needs apt-get and
# root or sudo; the package's service is not started (tests run their own Prometheus).
set -euo pipefail

if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "setup-prometheus: apt-get not found; install Prometheus 2.x (prometheus and promtool) by hand" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
install() {
    $sudo apt-get install -y --no-install-recommends prometheus >/dev/null
}
# A fresh machine may have no package lists yet.
install || { $sudo apt-get update >/dev/null && install; }
# Debian starts the service where systemd runs; the tests need none.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
    $sudo systemctl stop prometheus || true
fi
promtool --version | head -1
