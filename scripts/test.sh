#!/usr/bin/env bash
# The whole test suite, from a fresh clone: formatting, lints, then every test of the
# workspace (unit, conformance on kubesim, end-to-end on kubesim, kubectl, CRD drift).
# Needs the Rust toolchain (cargo, rustfmt, clippy) and, for the kubectl tests, kubectl on
# PATH; crates are fetched by cargo, and the tools the other tests use are installed by the
# scripts below.
set -euo pipefail
cd "$(dirname "$0")/.."

# Prometheus and promtool, for the observability tests.
./scripts/setup-prometheus.sh
# Helm's Go library (helm-sdkpy), for the chart tests.
./scripts/setup-helm.sh
# moto (S3 and IAM on loopback), for the Bucket tests.
./scripts/setup-moto.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
