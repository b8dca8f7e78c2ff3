#!/usr/bin/env bash
# Builds every fuzz target with libFuzzer's coverage instrumentation (stable Rust: the
# sancov pass and --cfg fuzzing, no sanitizer), writes the scripted seeds, and fuzzes each
# target for SECONDS (default 30) from corpus/<target>. A crash, panic, leak of time past
# 10 s on one input or failed assertion fails the run (non-zero status) and leaves the input
# in artifacts/<target>/; replay it with target/cov/<host>/fuzz/<target> FILE.
#
#   fuzz/run.sh [SECONDS] [TARGET...]      FUZZ_SEED=N picks libFuzzer's seed (default 1)
#                                          FUZZ_JOBS=N runs N targets at once (default nproc)
#   fuzz/run.sh --build-only [TARGET...]   builds the targets and writes the seeds, no fuzzing
#                                          (to build ahead of a run)
#   fuzz/run.sh --replay [TARGET...]       no instrumented build and no fuzzing: the targets
#                                          built as the tests build them (the workspace's dev
#                                          profile, its dependencies shared with the test build),
#                                          each run once on every scripted seed, on the inputs
#                                          in regressions/<target>/ and on four fixed ones (empty,
#                                          one 0xff byte, 4 KiB of 0x00, 4 KiB of 0xff). CI's
#                                          check that every target builds and still holds on
#                                          what once reached deep or broke it.
set -euo pipefail
cd "$(dirname "$0")"

if [ "${1:-}" = --replay ]; then
    shift
    targets=("$@")
    if [ ${#targets[@]} -eq 0 ]; then
        for f in fuzz_targets/*.rs; do
            targets+=("$(basename "$f" .rs)")
        done
    fi
    cargo build --quiet -p hvprof-fuzz $(printf -- '--bin %s ' "${targets[@]}" seeds)
    bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    "$bin/seeds" "$scratch/seeds"
    failed=0
    for t in "${targets[@]}"; do
        inputs="$scratch/inputs/$t"
        mkdir -p "$inputs"
        : >"$inputs/empty"
        printf '\377' >"$inputs/one-ff"
        printf '%4096s' '' | tr ' ' '\000' >"$inputs/zeros-4k"
        printf '%4096s' '' | tr ' ' '\377' >"$inputs/ff-4k"
        for kind in seed regression; do
            d="$scratch/seeds/$t"
            [ "$kind" = regression ] && d="regressions/$t"
            [ -d "$d" ] || continue
            for f in "$d"/*; do
                [ -f "$f" ] && cp "$f" "$inputs/$kind-${f##*/}"
            done
        done
        n=$(find "$inputs" -type f | wc -l)
        # libFuzzer's file mode: each input once, no mutation (it needs no instrumentation).
        if "$bin/$t" -timeout=30 "$inputs"/* >"$scratch/$t.log" 2>&1; then
            echo "fuzz: $t: $n inputs replayed"
        else
            tail -n 40 "$scratch/$t.log"
            echo "fuzz: $t FAILED on one of its $n inputs (seeds, regressions/$t, fixed)" >&2
            failed=1
        fi
    done
    exit "$failed"
fi

build_only=false
if [ "${1:-}" = --build-only ]; then
    build_only=true
    shift
    seconds=0
else
    seconds=${1:-30}
    shift || true
fi
host=$(rustc -vV | sed -n 's/^host: //p')
flags=(
    --cfg fuzzing
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cdebug-assertions
    -Coverflow-checks
)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi
# --target keeps the flags off build scripts and proc macros; the seed writer is built
# without them (it has no libFuzzer to link against).
RUSTFLAGS="${flags[*]}" cargo build --quiet --profile fuzz --target "$host" --target-dir target/cov \
    $(printf -- '--bin %s ' "${targets[@]}")
bin=target/cov/$host/fuzz
cargo run --quiet --bin seeds -- corpus
if $build_only; then
    exit 0
fi
# One target at a time per CPU (FUZZ_JOBS, default all of them): each libFuzzer run is a
# single process, so on two cores two run side by side in the time of one.
jobs=${FUZZ_JOBS:-$(nproc)}
fuzz_one() {
    local t=$1
    if ! "$bin/$t" "corpus/$t" -artifact_prefix="artifacts/$t/" -max_total_time="$seconds" \
        -timeout=10 -max_len=4096 -seed="${FUZZ_SEED:-1}" -print_final_stats=1 \
        >"artifacts/$t.log" 2>&1; then
        tail -n 40 "artifacts/$t.log"
        echo "fuzz: $t FAILED; the input is in fuzz/artifacts/$t/" >&2
        return 1
    fi
    grep -E "DONE" "artifacts/$t.log" | sed "s/^#[0-9]*[[:space:]]*DONE[[:space:]]*/fuzz: $t: /"
}
failed=0
running=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    echo "fuzz: $t for ${seconds}s ($(find "corpus/$t" -type f | wc -l) inputs to start from)"
    fuzz_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
exit "$failed"
