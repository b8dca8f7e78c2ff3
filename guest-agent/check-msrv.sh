#!/bin/sh
# Checks that guest-agent compiles with Rust 1.63, the Windows driver toolchain (Debian's rustc),
# against profile-core without its `alloc` feature (what a driver links). Uses rustc directly:
# Debian's cargo cannot read the workspace's newer manifest keys.
set -eu
cd "$(dirname "$0")"
RUSTC=/usr/bin/rustc
if [ ! -x "$RUSTC" ]; then
    echo "check-msrv: $RUSTC not found (Debian's rustc)" >&2
    exit 1
fi
echo "check-msrv: $("$RUSTC" --version)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$RUSTC" --edition 2021 --crate-type rlib --crate-name profile_core \
    -D warnings ../profile-core/src/lib.rs -o "$out/libprofile_core.rlib"
"$RUSTC" --edition 2021 --crate-type rlib --crate-name guest_agent \
    --extern profile_core="$out/libprofile_core.rlib" -L "$out" \
    -D warnings src/lib.rs -o "$out/libguest_agent.rlib"
echo "check-msrv: ok (guest-agent on profile-core without alloc)"
