#!/usr/bin/env bash
# Checks `hvprof bench --peer`'s perf-kvm row, which opens perf kvm's events from inside the
# bench, against the perf binary itself: runs the reference guest's call-stack workload (one
# vCPU, MS milliseconds) unprofiled and under `perf kvm --guest record -e cpu-clock -c PERIOD
# -t <vCPU thread>`, alternating, N rounds, and prints each run's rate of work (calls of the
# workload's round function per second) and perf's guest and host sample counts.
# Needs perf (Debian: linux-perf). Usage: tests/measure-perf-kvm.sh [N] [MS] [RATE_HZ]
set -euo pipefail
n=${1:-3}
ms=${2:-1000}
rate=${3:-10000}
command -v perf >/dev/null || {
    echo "perf is not installed (Debian package linux-perf): nothing to compare" >&2
    exit 2
}
cd "$(dirname "$0")/.."
cargo build --quiet --release --bin hvprof
hvprof=target/release/hvprof
elf=$(ls -t target/release/build/vmm-*/out/refguest-target/release/refguest | head -1)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
period=$((1000000000 / rate))

# Calls per second, summed over the guest's `stacks work` lines.
work() {
    sed -n 's/.*refguest: stacks work .* calls=\([0-9]*\) ticks=\([0-9]*\) tsc_khz=\([0-9]*\).*/\1 \2 \3/p' "$1" |
        awk '{ s += $1 / ($2 / ($3 * 1000)) } END { printf "%.0f", s }'
}

# The first vCPU thread of process $1.
vcpu_tid() {
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = vcpu0 ]; then
            basename "$t"
            return
        fi
    done
}

for i in $(seq 1 "$n"); do
    for mode in unprofiled perf-kvm; do
        out=$dir/$mode$i.txt
        "$hvprof" run --kernel "$elf" --cmdline "scenario=stacks stacks.ms=$ms" >"$out" 2>&1 &
        pid=$!
        samples=""
        if [ "$mode" = perf-kvm ]; then
            until grep -q "refguest: stacks ms=" "$out" 2>/dev/null; do sleep 0.001; done
            data=$dir/perf$i.data
            # perf record ends by itself when the thread it follows exits.
            perf kvm --guest -o "$data" record -q -e cpu-clock -c "$period" -t "$(vcpu_tid $pid)" \
                >"$dir/perf$i.log" 2>&1 || { cat "$dir/perf$i.log" >&2; exit 1; }
            # misc 4 and 5 are the guest's kernel and user mode.
            samples=$(perf report -D -i "$data" 2>/dev/null |
                awk '/PERF_RECORD_SAMPLE\(/ { if ($0 ~ /\(IP, 0x[45]\)/) g++; else h++ }
                     END { printf " guest samples %d, host %d", g, h }')
        fi
        wait "$pid" || true # the guest's PASS is a debug-exit status, not 0
        echo "round $i $mode: work/s $(work "$out")$samples"
    done
done
