#!/usr/bin/env bash
# Builds hvprof's Linux test guest from Debian's linux-source-6.1 into OUT (default
# target/linux): OUT/vmlinux (a PVH ELF with symbols, DWARF and a .BTF section),
# OUT/vmlinux.btf (its types as raw BTF) and OUT/initramfs.cpio (busybox, images/linux/init
# and the burn workload, built three times from burn.c: static without and with frame
# pointers, and dynamic with the host's ld.so and libc.so.6; uncompressed). tinyconfig plus
# hvprof.config, pvm-host-quirks.patch, which changes nothing unless the kernel is booted
# with "pvm_host_quirks", and hz-25.patch, a 25 Hz choice for the timer tick.
#
# Needs: linux-source-6.1, busybox-static, gcc, make, bc, bison, flex, libelf-dev, xz-utils,
# and pahole (Debian's dwarves), which writes the kernel's types as BTF (vmlinux.btf).
# The kernel is built again only when its recipe changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here/../../target/linux}" && cd "${1:-$here/../../target/linux}" && pwd)
src_tar=/usr/src/linux-source-6.1.tar.xz
busybox=/bin/busybox
for f in "$src_tar" "$busybox"; do
    [ -e "$f" ] || { echo "build.sh: $f is missing (apt-get install linux-source-6.1 busybox-static)" >&2; exit 2; }
done
command -v pahole >/dev/null || { echo "build.sh: pahole is missing (apt-get install dwarves)" >&2; exit 2; }

build_kernel() {
    rm -f "$out/recipe"
    rm -rf "$tree"
    echo "build.sh: unpacking $src_tar"
    tar -C "$out" -xf "$src_tar"
    for p in "${patches[@]}"; do
        patch -d "$tree" -p1 --quiet < "$p"
    done
    make -C "$tree" -s tinyconfig
    "$tree/scripts/kconfig/merge_config.sh" -m -O "$tree" "$tree/.config" "$here/hvprof.config" >/dev/null
    make -C "$tree" -s olddefconfig
    # Every line of the fragment must have survived olddefconfig (a dependency missing drops one).
    missing=$(grep -E '^CONFIG_' "$here/hvprof.config" | while read -r line; do
        case "$line" in
            *=n) ! grep -qE "^${line%=n}=[ym]" "$tree/.config" || echo "$line" ;;
            *) grep -qxF "$line" "$tree/.config" || echo "$line" ;;
        esac
    done)
    if [ -n "$missing" ]; then
        echo "build.sh: the kernel configuration lost: $missing" >&2
        exit 1
    fi
    echo "build.sh: building vmlinux with $(nproc) jobs"
    make -C "$tree" -s -j"$(nproc)" vmlinux
    cp "$tree/vmlinux" "$out/vmlinux"
    add_btf
}

# The kernel's types as BTF, from its DWARF by pahole: OUT/vmlinux.btf (a raw blob, as
# /sys/kernel/btf/vmlinux is) and the same in a .BTF section of OUT/vmlinux, not loaded (no
# program header covers it), where hvprof finds it with the symbols. A pahole that failed
# quietly would leave a kernel without the types hvprof names processes with: checked.
add_btf() {
    rm -f "$out/vmlinux.btf"
    if ! pahole --btf_encode_detached="$out/vmlinux.btf" "$out/vmlinux" ||
        [ "$(od -An -tx1 -N2 "$out/vmlinux.btf" 2>/dev/null | tr -d ' ')" != 9feb ]; then
        echo "build.sh: pahole $(pahole --version) wrote no BTF from $out/vmlinux (built without DWARF?)" >&2
        exit 1
    fi
    chmod 644 "$out/vmlinux.btf"
    objcopy --add-section .BTF="$out/vmlinux.btf" --set-section-flags .BTF=readonly \
        "$out/vmlinux" "$out/vmlinux.tmp"
    mv "$out/vmlinux.tmp" "$out/vmlinux"
}

tree="$out/linux-source-6.1"
# The kernel's patches: the PVM host quirks (a boot option) and a 25 Hz tick choice.
patches=("$here/pvm-host-quirks.patch" "$here/hz-25.patch")
# The kernel is rebuilt when its recipe (the two functions above, the config, the patch, the
# source) changes; the initramfs is cheap and always rebuilt.
recipe=$( (declare -f build_kernel add_btf; cat "$here/hvprof.config" "${patches[@]}" "$src_tar") | sha256sum | cut -d' ' -f1)
if [ -f "$out/vmlinux" ] && [ -f "$out/vmlinux.btf" ] && [ -x "$tree/usr/gen_init_cpio" ] && [ "$(cat "$out/recipe" 2>/dev/null)" = "$recipe" ]; then
    echo "build.sh: $out/vmlinux is up to date"
else
    build_kernel
    echo "$recipe" >"$out/recipe"
fi

# The workload whose user-mode functions the tests name: static and unstripped, so that
# hvprof finds its symbols in this initramfs; once without frame pointers, once with them.
gcc -static -O2 -g -fomit-frame-pointer -o "$out/burn" "$here/burn.c"
gcc -static -O2 -g -fno-omit-frame-pointer -o "$out/burn-fp" "$here/burn.c"
# And a dynamic PIE, with the host's ld.so (the program's PT_INTERP path) and libc.so.6 at
# the paths the guest's ld.so looks them up at.
gcc -O2 -g -fomit-frame-pointer -o "$out/burn-dyn" "$here/burn.c"
interp=$(readelf -lW "$out/burn-dyn" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
libc=$(gcc -print-file-name=libc.so.6)
for f in "$interp" "$libc"; do
    [ -f "$f" ] || { echo "build.sh: no $f for the dynamic workload (apt-get install libc6-dev)" >&2; exit 2; }
done

cat >"$out/initramfs.list" <<LIST
dir /bin 755 0 0
dir /dev 755 0 0
dir /proc 755 0 0
dir /sys 755 0 0
dir /mnt 755 0 0
dir /tmp 1777 0 0
nod /dev/console 600 0 0 c 5 1
file /bin/busybox $busybox 755 0 0
slink /bin/sh busybox 777 0 0
slink /bin/awk busybox 777 0 0
slink /bin/seq busybox 777 0 0
file /init $here/init 755 0 0
file /bin/burn $out/burn 755 0 0
file /bin/burn-fp $out/burn-fp 755 0 0
file /bin/burn-dyn $out/burn-dyn 755 0 0
dir /lib 755 0 0
dir /lib/x86_64-linux-gnu 755 0 0
dir $(dirname "$interp") 755 0 0
file $interp $interp 755 0 0
file /lib/x86_64-linux-gnu/libc.so.6 $libc 755 0 0
LIST
"$tree/usr/gen_init_cpio" "$out/initramfs.list" >"$out/initramfs.cpio"
echo "build.sh: $out/vmlinux and $out/initramfs.cpio"
