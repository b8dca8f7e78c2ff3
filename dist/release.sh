#!/usr/bin/env bash
# Builds hvprof's release files into OUT (default target/dist/out):
#   hvprof_VERSION-1_amd64.deb                  the Debian package (cargo deb, glibc build)
#   hvprof-VERSION-x86_64-linux-musl.tar.gz     the static binary with man pages, completions,
#                                               README and LICENSE
#   SHA256SUMS                                  both files' checksums
# Reproducible: SOURCE_DATE_EPOCH (default: the commit's time) dates every file, archive
# members are sorted and owned by root, gzip records no name or time. Needs cargo-deb
# (cargo install cargo-deb), dpkg-dev, binutils and the x86_64-unknown-linux-musl target
# (rustup target add x86_64-unknown-linux-musl). dist/check.sh installs and runs the results.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-target/dist/out}
musl=x86_64-unknown-linux-musl
: "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH
version=$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "hvprof"))')

cargo build --release --locked -p hvprof
cargo build --release --locked -p hvprof --target "$musl"
glibc_bin=target/release/hvprof
static_bin=target/$musl/release/hvprof

# Man pages and completions, from the binary's own argument definitions.
assets=target/dist
rm -rf "$assets/man" "$assets/completions"
mkdir -p "$assets/man" "$assets/completions" "$out"
"$glibc_bin" man "$assets/man"
gzip -n -9 -f "$assets"/man/*.1
"$glibc_bin" completions bash >"$assets/completions/hvprof.bash"
"$glibc_bin" completions zsh >"$assets/completions/_hvprof"
"$glibc_bin" completions fish >"$assets/completions/hvprof.fish"

# The package: the glibc build, stripped, its dependencies computed from it.
deb=$(cargo deb -p hvprof --no-build --strip --output "$out" | tail -n 1)
echo "release: $deb"

# The tarball: the static build and the same man pages and completions.
name=hvprof-$version-x86_64-linux-musl
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/man/man1" "$stage/$name/completions"
install -m 755 "$static_bin" "$stage/$name/hvprof"
strip "$stage/$name/hvprof"
install -m 644 "$assets"/man/*.1.gz "$stage/$name/man/man1/"
install -m 644 "$assets"/completions/* "$stage/$name/completions/"
install -m 644 README.md LICENSE "$stage/$name/"
tarball=$out/$name.tar.gz
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --format=gnu -C "$stage" -cf - "$name" | gzip -n -9 >"$tarball.tmp"
mv "$tarball.tmp" "$tarball"
echo "release: $tarball"

(cd "$out" && sha256sum "$(basename "$deb")" "$name.tar.gz" >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
echo "release: $out/SHA256SUMS"
