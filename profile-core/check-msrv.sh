#!/bin/sh
# Checks that profile-core compiles with Rust 1.63, the Windows driver toolchain (Debian's
# rustc). Compiles the crate twice with rustc directly (Debian's cargo cannot read the
# workspace's newer manifest keys): with the `alloc` feature (the whole crate) and without it
# (the ABI alone, what the driver links).
set -eu
cd "$(dirname "$0")"
RUSTC=/usr/bin/rustc
if [ ! -x "$RUSTC" ]; then
    echo "check-msrv: installing Debian's rustc" >&2
    apt-get install -y rustc >/dev/null
fi
version=$("$RUSTC" --version)
echo "check-msrv: $version"
case "$version" in
    "rustc 1.63."*) ;;
    *) echo "check-msrv: warning: expected rustc 1.63.x" >&2 ;;
esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$RUSTC" --edition 2021 --crate-type rlib --crate-name profile_core \
    --cfg 'feature="alloc"' -D warnings src/lib.rs -o "$out/with_alloc.rlib"
"$RUSTC" --edition 2021 --crate-type rlib --crate-name profile_core \
    -D warnings src/lib.rs -o "$out/abi_only.rlib"
echo "check-msrv: ok (with and without the alloc feature)"
