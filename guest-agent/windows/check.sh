#!/usr/bin/env bash
# Static and wine checks of the built Windows agent (build.sh runs it; CI may run it alone).
# Everything is read from the tools' output, nothing assumed; any failed check exits nonzero.
set -euo pipefail
out=${1:-target/windows}
sys=$out/hvprof.sys
exe=$out/hvprof-agent.exe
fail=0
ok() { echo "check-windows: ok: $*"; }
bad() { echo "check-windows: FAILED: $*" >&2; fail=1; }

p=$(x86_64-w64-mingw32-objdump -p "$sys")
grep -q 'file format pei-x86-64' <<<"$p" && grep -Eq '^Magic[[:space:]]+020b[[:space:]]+\(PE32\+\)' <<<"$p" \
    && ok "hvprof.sys is PE32+ (x86-64)" || bad "hvprof.sys is not a PE32+ image"
grep -Eq '^Subsystem[[:space:]]+00000001[[:space:]]+\(NT native\)' <<<"$p" \
    && ok "hvprof.sys subsystem is native (1)" || bad "hvprof.sys subsystem is not native"
entry=$(awk '/^AddressOfEntryPoint/ {print $2}' <<<"$p")
base=$(awk '/^ImageBase/ {print $2}' <<<"$p")
sym=$(x86_64-w64-mingw32-nm "$sys" | awk '$3 == "DriverEntry" {print $1}' | head -1)
hex='^[0-9a-fA-F]+$'
if [[ $entry =~ $hex && $base =~ $hex && $sym =~ $hex ]] && [ $(( 0x$base + 0x$entry )) -eq $(( 0x$sym )) ]; then
    ok "entry point: image base 0x$base + AddressOfEntryPoint 0x$entry = DriverEntry (0x$sym)"
else
    bad "entry point 0x$entry (base 0x$base) is not DriverEntry (${sym:-no DriverEntry symbol})"
fi
dlls=$(awk '/DLL Name:/ {print $3}' <<<"$p" | sort -u)
others=$(grep -viE '^(ntoskrnl\.exe|hal\.dll)$' <<<"$dlls" || true)
if [ -n "$dlls" ] && [ -z "$others" ]; then
    ok "hvprof.sys imports only from: $(tr '\n' ' ' <<<"$dlls")"
else
    bad "hvprof.sys imports from other DLLs: ${others:-none at all}"
fi
grep -q 'Base Relocation Directory \[.reloc\]' <<<"$p" && ! grep -Eq 'Entry 5 0+ 0+ ' <<<"$p" \
    && ok "hvprof.sys has base relocations" || bad "hvprof.sys has no .reloc (drivers are always relocated)"
grep -q '__C_specific_handler' <<<"$p" \
    && ok "hvprof.sys catches MmProbeAndLockPages' exceptions with __C_specific_handler" \
    || bad "hvprof.sys lacks the SEH handler import"
sum=$(awk '/^CheckSum/ {print $2}' <<<"$p")
[ "$sum" != "00000000" ] && ok "hvprof.sys has a PE checksum ($sum)" || bad "hvprof.sys has no checksum"

q=$(x86_64-w64-mingw32-objdump -p "$exe")
grep -Eq '^Magic[[:space:]]+020b' <<<"$q" && grep -Eq '^Subsystem[[:space:]]+00000003' <<<"$q" \
    && ok "hvprof-agent.exe is a PE32+ console program" || bad "hvprof-agent.exe is not a PE32+ console program"

export WINEDEBUG=-all WINEPREFIX=${WINEPREFIX:-$PWD/target/windows/wineprefix}
# wine's exit status is not reliable: judge by the output.
help=$(wine "$exe" --help 2>/dev/null || true)
grep -q '^USAGE:' <<<"$help" && grep -q -- '--module NAME' <<<"$help" \
    && ok "wine hvprof-agent.exe --help prints the usage" || bad "--help under wine: $help"
nodrv=$(wine "$exe" --module ntoskrnl.exe --seconds 1 2>&1 || true)
grep -q 'cannot open \\\\.\\HvProf: the hvprof driver (hvprof.sys) is not installed or not running' <<<"$nodrv" \
    && ok "without the driver: $(grep 'cannot open' <<<"$nodrv")" || bad "no clear error without the driver: $nodrv"

[ $fail -eq 0 ] || { echo "check-windows: some checks FAILED" >&2; exit 1; }
echo "check-windows: all checks passed"
