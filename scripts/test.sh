#!/usr/bin/env bash
# The whole test suite, from a fresh clone: formatting, lints, then every test of the
# workspace (unit, conformance on kubesim, end-to-end on kubesim, kubectl, CRD drift).
# Needs only the Rust toolchain (cargo, rustfmt, clippy) and, for the kubectl tests,
# kubectl on PATH; crates are fetched by cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
