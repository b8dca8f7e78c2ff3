#!/usr/bin/env bash
# Measures `hvprof compare`'s false-positive rate: profiles the reference guest's unchanged
# 1:2:4 workload N times, compares every ordered pair, and counts the comparisons that report
# a regression (exit status 1), for each --scope. Usage: tests/measure-compare-fpr.sh [N] [WORKLOAD]
# PROFILE_ARGS adds options to `hvprof profile` (e.g. PROFILE_ARGS="--cpl 3").
set -euo pipefail
n=${1:-12}
workload=${2:-"scenario=shares shares.ms=4000 shares.interval=5000"}
cd "$(dirname "$0")/.."
cargo build --quiet --release --bin hvprof
hvprof=target/release/hvprof
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq 1 "$n"); do
    # shellcheck disable=SC2086
    "$hvprof" profile ${PROFILE_ARGS:-} --cmdline "$workload" --out "$dir/run$i" --quiet --serial null \
        >/dev/null 2>&1
done
for scope in guest host all; do
    pairs=0
    flagged=0
    for i in $(seq 1 "$n"); do
        for j in $(seq 1 "$n"); do
            [ "$i" = "$j" ] && continue
            pairs=$((pairs + 1))
            if ! "$hvprof" compare --scope "$scope" "$dir/run$i/profile.json" \
                "$dir/run$j/profile.json" >/dev/null; then
                flagged=$((flagged + 1))
            fi
        done
    done
    echo "scope=$scope runs=$n comparisons=$pairs flagged=$flagged workload=\"$workload\" profile_args=\"${PROFILE_ARGS:-}\""
done
