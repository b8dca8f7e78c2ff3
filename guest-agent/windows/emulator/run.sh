#!/usr/bin/env bash
# Runs hvprof.sys under the emulated NT kernel (ntemu/), its doorbell answered by the VMM's own
# hypercall code (vmm/examples/emu_doorbell.rs), then checks that a driver with its __try scope
# emptied fails the suite. Usage: run.sh [path/to/hvprof.sys] (default target/windows/hvprof.sys,
# as guest-agent/windows/build.sh leaves it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"
start=$(date +%s)
sys=${1:-target/windows/hvprof.sys}
# Pinned: the CPU emulator and the PE parser (nothing else is used from PyPI).
python3 -c 'import unicorn, pefile; assert unicorn.__version__ == "1.0.2"' 2>/dev/null \
    || python3 -m pip install -q unicorn==1.0.2 pefile==2024.8.26
cargo build -q -p vmm --example emu_doorbell
cargo build -q -p hvprof-agent --example emulated_session
export EMU_DOORBELL=$root/target/debug/examples/emu_doorbell
export EMULATED_SESSION=$root/target/debug/examples/emulated_session
export PYTHONPATH=$here
echo "ntkernel: the suite on $sys"
HVPROF_SYS=$sys python3 -W error::ResourceWarning -m unittest -v test_driver test_session 2>&1 | tail -n 40

# A deliberately broken driver: the same sources with the SEH scope emptied (begin = end), so
# MmProbeAndLockPages' exception has no handler. Every static check still passes; the suite
# must fail.
broken=target/windows/broken
rm -rf "$broken" && mkdir -p "$broken"
sed 's/^\(    \.rva    \)\.Ltry_end /\1.Ltry_begin /' guest-agent/windows/driver/src/seh.S > "$broken/seh.S"
if cmp -s guest-agent/windows/driver/src/seh.S "$broken/seh.S"; then
    echo "ntkernel: FAILED: could not empty the SEH scope of seh.S" >&2; exit 1
fi
HVPROF_SEH_S=$broken/seh.S HVPROF_WINDOWS_OUT=$broken bash guest-agent/windows/build.sh --no-check >/dev/null
if HVPROF_SYS=$broken/hvprof.sys python3 -m unittest -q test_driver.Calls.test_a_buffer_that_vanished_before_start_is_caught_by_the_seh_scope >"$broken/log" 2>&1; then
    echo "ntkernel: FAILED: the suite passed a driver without its SEH scope" >&2; exit 1
fi
echo "ntkernel: the driver without its SEH scope fails, as it must: $(grep -m1 -o 'bug check.*' "$broken/log")"
echo "ntkernel: ok in $(( $(date +%s) - start )) s"
