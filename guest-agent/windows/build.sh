#!/usr/bin/env bash
# Builds the Windows guest agent on Debian/Linux and checks it:
#   target/windows/hvprof.sys        the kernel driver (no_std Rust + seh.S, mingw-w64 ld)
#   target/windows/hvprof-agent.exe  the command-line tool (std Rust, x86_64-pc-windows-gnu)
# Installs what it needs with apt-get when missing (idempotent), compiles with Debian's rustc
# 1.63 called directly (no cargo: Debian's cargo cannot read this workspace's manifests and no
# crate is needed), then runs check.sh, which fails loudly on any static or wine check.
#
# Why rustc by hand, and so a second copy of the crate graph: the x86_64-pc-windows-gnu
# standard library here is Debian's (libstd-rust-dev-windows), built for Debian's rustc 1.63
# only; the rustup toolchain has no Windows target and cannot get one offline, and Debian's
# cargo (1.65) cannot read this workspace's manifests (`[lints] workspace = true` needs 1.74). So
# this script must stay the build of record for the Windows agent, and must stay in step with
# the manifests it mirrors: when one of them gains or loses a dependency, a feature or a
# source root, change the matching `lib`/rustc line below.
#   profile_core   profile-core/Cargo.toml, built as guest-agent and hvprof-ioctl take it:
#                  `default-features = false` (no `alloc`), so no --cfg feature here
#   hvprof_ioctl   guest-agent/windows/ioctl/Cargo.toml  (-> profile-core)
#   guest_agent    guest-agent/Cargo.toml                (-> profile-core)
#   hvprof_driver  guest-agent/windows/driver/src/lib.rs (no manifest: -> guest-agent,
#                  hvprof-ioctl; the workspace excludes it)
#   hvprof_agent   guest-agent/windows/cli/Cargo.toml    (-> hvprof-ioctl; lib.rs + main.rs)
# A test holds the two copies together: tests/structure/deps.rs checks that each `lib` line's
# --extern list is the repository crates its manifest depends on (`cargo nextest run --test
# guests structure`); the driver's line, which has no manifest, is checked by building it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
start=$(date +%s)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
[ -x /usr/bin/rustc ] || need+=(rustc)
[ -d /usr/lib/rustlib/x86_64-pc-windows-gnu/lib ] || need+=(libstd-rust-dev-windows)
command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(gcc-mingw-w64-x86-64-win32)
[ -f /usr/x86_64-w64-mingw32/lib/libntoskrnl.a ] || need+=(mingw-w64-x86-64-dev)
command -v x86_64-w64-mingw32-objdump >/dev/null || need+=(binutils-mingw-w64-x86-64)
command -v wine >/dev/null || need+=(wine wine64)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
    echo "build-windows: installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "build-windows: $(/usr/bin/rustc --version), $(x86_64-w64-mingw32-gcc --version | head -1)"

out=${HVPROF_WINDOWS_OUT:-target/windows}
seh=${HVPROF_SEH_S:-guest-agent/windows/driver/src/seh.S}
drv=$out/obj/driver
cli=$out/obj/cli
mkdir -p "$drv" "$cli"
T=x86_64-pc-windows-gnu
RUSTC=(/usr/bin/rustc --edition 2021 --target "$T" -D warnings -C opt-level=2)

# The ABI (profile-core without `alloc`, exactly what the VMM compiles) and the IOCTL contract,
# once per panic strategy: the driver aborts, the CLI unwinds.
lib() { # dir crate-name src [extern...]
    local dir=$1 name=$2 src=$3; shift 3
    "${RUSTC[@]}" "${extra[@]}" --crate-type rlib --crate-name "$name" -L "$dir" "$@" "$src" --out-dir "$dir"
}
extra=(-C panic=abort)
lib "$drv" profile_core profile-core/src/lib.rs
lib "$drv" hvprof_ioctl guest-agent/windows/ioctl/src/lib.rs --extern profile_core="$drv/libprofile_core.rlib"
lib "$drv" guest_agent guest-agent/src/lib.rs --extern profile_core="$drv/libprofile_core.rlib"
"${RUSTC[@]}" -C panic=abort -C lto=fat -C codegen-units=1 --crate-type staticlib \
    --crate-name hvprof_driver -L "$drv" \
    --extern guest_agent="$drv/libguest_agent.rlib" --extern hvprof_ioctl="$drv/libhvprof_ioctl.rlib" \
    guest-agent/windows/driver/src/lib.rs --out-dir "$drv"
# The structure layouts nt.rs declares, against mingw-w64's DDK headers.
x86_64-w64-mingw32-gcc -I/usr/x86_64-w64-mingw32/include/ddk -fsyntax-only \
    guest-agent/windows/driver/layout_check.c
x86_64-w64-mingw32-gcc -c "$seh" -o "$drv/seh.o"
x86_64-w64-mingw32-gcc -nostdlib -nostartfiles \
    -Wl,--subsystem,native -Wl,--entry,DriverEntry -Wl,--image-base,0x140000000 \
    -Wl,--dynamicbase -Wl,--nxcompat -Wl,--gc-sections \
    -o "$out/hvprof.sys" "$drv/seh.o" "$drv/libhvprof_driver.a" -lntoskrnl
python3 guest-agent/windows/pe_checksum.py "$out/hvprof.sys"

extra=()
lib "$cli" profile_core profile-core/src/lib.rs
lib "$cli" hvprof_ioctl guest-agent/windows/ioctl/src/lib.rs --extern profile_core="$cli/libprofile_core.rlib"
lib "$cli" hvprof_agent guest-agent/windows/cli/src/lib.rs --extern hvprof_ioctl="$cli/libhvprof_ioctl.rlib"
"${RUSTC[@]}" -C linker=x86_64-w64-mingw32-gcc -C strip=debuginfo --crate-type bin \
    --crate-name hvprof_agent -L "$cli" --extern hvprof_agent="$cli/libhvprof_agent.rlib" \
    guest-agent/windows/cli/src/main.rs -o "$out/hvprof-agent.exe"
cp guest-agent/windows/driver/hvprof.inf "$out/hvprof.inf"

echo "build-windows: built $out/hvprof.sys and $out/hvprof-agent.exe in $(( $(date +%s) - start )) s"
[ "${1:-}" = --no-check ] && exit 0
bash "$here/check.sh" "$out"
echo "build-windows: ok in $(( $(date +%s) - start )) s"
