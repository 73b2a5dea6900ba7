#!/usr/bin/env bash
# Builds kopper as a fully static binary and the container image `kopper:dev` (and
# `kopper:<version>`) from it. No registry is needed: the image starts FROM scratch.
#   scripts/image.sh            # build
#   KOPPER_IMAGE=name:tag scripts/image.sh
#   KOPPER_IMAGE_BINARY=path scripts/image.sh   # no build: put this static kopper binary in
#   KOPPER_IMAGE_REUSE=path scripts/image.sh    # this binary if it is static, else build
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
image=${KOPPER_IMAGE:-kopper:dev}
# `release` for the image people run; the tests use `image-test` (Cargo.toml), the same
# binary built faster, since they check how the container runs, not how fast kopper is.
profile=${KOPPER_IMAGE_PROFILE:-release}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

# Whether the binary at $1 needs no dynamic loader (no INTERP program header), so it can
# run on an empty base image. (grep reads all of readelf's output: with -q it could stop
# early, and pipefail would then see readelf killed by SIGPIPE.)
is_static() {
    ! readelf --program-headers "$1" | grep INTERP >/dev/null
}

binary=${KOPPER_IMAGE_BINARY:-}
# A binary the caller already built (the tests' own, which scripts/test.sh builds static):
# reused when it would run FROM scratch, so no second build of kopper is needed.
reuse=${KOPPER_IMAGE_REUSE:-}
if [ -z "$binary" ] && [ -n "$reuse" ] && is_static "$reuse"; then
    binary=$reuse
fi
prebuilt=$binary
if [ -z "$binary" ]; then
    # crt-static links glibc statically; --target keeps the flags off build scripts and proc
    # macros. Without unwinding (panic = "abort") the binary needs no unwind tables, and
    # lld folds the many identical functions generic code instantiates (--icf=all) and packs
    # the position-independent binary's relocations (RELR, which glibc 2.36 applies).
    RUSTFLAGS="-C target-feature=+crt-static -C force-unwind-tables=no -C link-arg=-Wl,--icf=all -C link-arg=-Wl,-z,pack-relative-relocs" \
        cargo build --profile "$profile" --locked --target "$target" -p kopper --bin kopper
    binary="target/$target/$profile/kopper"
fi

context=target/image
rm -rf "$context"
mkdir -p "$context"
cp "$binary" "$context/kopper"
# Symbols are for debuggers, not for a cluster: a third of the binary.
strip --strip-all "$context/kopper"
cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt"
echo "nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin" > "$context/passwd"
echo "nonroot:x:65532:" > "$context/group"

# A dynamic binary would not start on an empty base: refuse it here rather than there.
if ! is_static "$context/kopper"; then
    echo "image.sh: $context/kopper is not statically linked" >&2
    exit 1
fi

tags=(-t "$image")
if [ "$profile" = release ] && [ -z "$prebuilt" ]; then
    tags+=(-t "kopper:$version")
fi
docker build --quiet -f Dockerfile "${tags[@]}" "$context" >/dev/null
size=$(docker image inspect "$image" --format '{{.Size}}')
echo "built $image ($((size / 1024 / 1024)) MiB)"
