#!/usr/bin/env bash
# The whole test suite, from a fresh clone: formatting, lints, then every test of the
# workspace (unit, conformance on kubesim, end-to-end on kubesim, kubectl, CRD drift).
# Needs the Rust toolchain (cargo, rustfmt, clippy) and, for the kubectl tests, kubectl on
# PATH; crates are fetched by cargo, and the tools the other tests use are installed by the
# scripts below. Prints the time each phase took at the end, so a slower suite is seen
# when it happens.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()
phase_started=$SECONDS
suite_started=$SECONDS
# Records the phase that just ended, named $1.
phase_done() {
    phases+=("$(printf '%-8s %5d s' "$1" $((SECONDS - phase_started)))")
    phase_started=$SECONDS
}
test_log=$(mktemp)
report() {
    local status=$?
    echo
    echo "test.sh phases (exit $status):"
    printf '  %s\n' "${phases[@]}"
    printf '  %-8s %5d s\n' total $((SECONDS - suite_started))
    # One closing line for the whole suite, summed over every test binary's.
    awk '/^test result:/ { for (i = 1; i <= NF; i++) { n = $(i - 1) + 0;
            if ($i ~ /^passed/) p += n; else if ($i ~ /^failed/) f += n; else if ($i ~ /^ignored/) s += n } }
         END { if (p + f + s > 0) printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$test_log"
    rm -f "$test_log"
}
trap report EXIT

# Prometheus and promtool, for the observability tests.
./scripts/setup-prometheus.sh
# Helm's Go library (helm-sdkpy), for the chart tests.
./scripts/setup-helm.sh
# moto (S3 and IAM on loopback), for the Bucket tests.
./scripts/setup-moto.sh
phase_done set-up

cargo fmt --all -- --check
# No two files of kopper import each other in a circle; runtime/ names no controller.
python3 scripts/check-module-cycles.py
phase_done lint

# One build serves clippy, the tests and the image test:
# - clippy runs as the compiler of the workspace's own crates while the tests build (a
#   separate `cargo clippy` would compile every dependency a second time, in check mode);
#   CLIPPY_ARGS is how cargo-clippy hands clippy-driver its `-D warnings`;
# - the tests build for the explicit target with glibc linked statically, so the kopper
#   binary they build is the one the image test puts in a container (no second build of
#   the dependencies for the image). --target keeps the flag off build scripts and proc
#   macros.
# - no debug info: a failing test names its file and line without it, and every crate
#   compiles and links quicker (Cargo.toml's dev profile keeps line tables for local work).
export CARGO_PROFILE_DEV_DEBUG=false
export CARGO_BUILD_TARGET=x86_64-unknown-linux-gnu
export RUSTFLAGS="-C target-feature=+crt-static"
export RUSTC_WORKSPACE_WRAPPER=clippy-driver
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
cargo test --workspace --all-targets --locked --no-run
phase_done build

cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$test_log"
phase_done tests
