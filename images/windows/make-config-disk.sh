#!/usr/bin/env bash
# Builds the FAT config disk Windows Setup and setup-agent.cmd read: autounattend.xml, the
# scripts and the agent from target/windows. Needs mtools and dosfstools (installed if missing).
set -euo pipefail
out=${1:?usage: make-config-disk.sh OUTPUT.img}
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "$here/../.." && pwd)/target/windows
for f in hvprof.sys hvprof.inf hvprof-agent.exe; do
    [ -f "$bin/$f" ] || { echo "make-config-disk: $bin/$f missing: run guest-agent/windows/build.sh" >&2; exit 1; }
done
command -v mcopy >/dev/null && command -v mkfs.fat >/dev/null || \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mtools dosfstools >/dev/null
rm -f "$out"
mkfs.fat -C -n HVPROFCFG "$out" 65536 >/dev/null
mcopy -i "$out" "$here/autounattend.xml" "$here/setup-agent.cmd" "$here/workload.cmd" \
    "$bin/hvprof.sys" "$bin/hvprof.inf" "$bin/hvprof-agent.exe" ::
# Signed copies (hvprof.cat, hvprof-test.cer), if you made them on a Windows machine:
for f in hvprof.cat hvprof-test.cer; do
    [ -f "$here/signed/$f" ] && mcopy -o -i "$out" "$here/signed/$f" ::
done
mdir -i "$out" ::
