#!/usr/bin/env bash
# hvprof needs no privilege beyond read-write access to /dev/kvm: run `hvprof demo` and
# `hvprof profile` (seccomp filters on, the default) as an ordinary user in /dev/kvm's group.
# As root, creates that user (hvprof-ci) if needed; otherwise runs as the calling user.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-target/debug/hvprof}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The user may not be able to reach the checkout: give it its own copy of the binary.
install -m 755 "$bin" "$work/hvprof"
chmod 755 "$work"

if [ "$(id -u)" -eq 0 ]; then
    user=hvprof-ci
    group=$(stat -c %G /dev/kvm)
    id "$user" >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin "$user"
    usermod -aG "$group" "$user"
    as_user=(runuser -u "$user" --)
else
    as_user=()
fi
out=$work/out
mkdir -m 777 "$out"
"${as_user[@]}" sh -c 'test "$(id -u)" -ne 0 && grep -q "^CapEff:[[:space:]]*0*$" /proc/self/status' ||
    { echo "unprivileged: the run would have privileges" >&2; exit 1; }
"${as_user[@]}" "$work/hvprof" demo --out "$out/demo" >"$work/demo.log" 2>&1 ||
    { cat "$work/demo.log"; echo "unprivileged: hvprof demo failed" >&2; exit 1; }
"${as_user[@]}" "$work/hvprof" profile --quiet --cmdline "scenario=shares shares.ms=500" \
    --out "$out/profile" >"$work/profile.log" 2>&1 ||
    { cat "$work/profile.log"; echo "unprivileged: hvprof profile failed" >&2; exit 1; }
test -s "$out/profile/profile.json"
# Where perf events are closed to ordinary users (perf_event_paranoid 2 and up, Debian's
# default), --clock cpu must refuse to start with status 2 and say why.
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 0)
if [ "$paranoid" -ge 2 ]; then
    rc=0
    "${as_user[@]}" "$work/hvprof" demo --clock cpu >"$work/clock.log" 2>&1 || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q "perf_event_paranoid=$paranoid" "$work/clock.log"; then
        cat "$work/clock.log"
        echo "unprivileged: --clock cpu without perf should end with status 2 and the reason" >&2
        exit 1
    fi
fi
echo "unprivileged: hvprof demo and profile passed as $("${as_user[@]}" id -un) (uid $("${as_user[@]}" id -u))"
