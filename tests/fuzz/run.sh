#!/usr/bin/env bash
# Runs each libFuzzer target given for SECONDS: first every input of its seed corpus
# (tests/fuzz/corpus/NAME, which holds the inputs of every crash found so far, so they are
# regression tests), then new inputs, kept in build/fuzz/corpus/NAME between runs. A crash,
# leak, UBSan finding or timeout stops that target and fails the run; its input is left as
# build/fuzz/NAME-crash-* (add it to the seed corpus with the fix). Prints one line per target
# and appends it to build/fuzz/summary.tsv (target, seconds taken, executions, crashes).
# Usage: tests/fuzz/run.sh SECONDS build/fuzz/fuzz_NAME...
#        FUZZ_RUNS=N tests/fuzz/run.sh ...   (also stop a target after N executions)
set -u
cd "$(dirname "$0")/../.."
secs=$1
shift
out=build/fuzz
mkdir -p "$out"
failed=()
for bin in "$@"; do
    name=$(basename "$bin")
    name=${name#fuzz_}
    seeds=tests/fuzz/corpus/$name
    work=$out/corpus/$name
    mkdir -p "$work"
    log=$out/$name.log
    # -timeout: one input taking this long is a finding (posd must not stall on any input)
    "$bin" -max_total_time="$secs" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/$name-" "$work" "$seeds" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
    crashes=0
    if [ $rc -ne 0 ]; then
        crashes=1
        failed+=("$name")
        grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -n 8
    fi
    echo "fuzz $name: ${execs:-?} executions in ${took:-$secs} s, $crashes crash(es) (log $log)"
    printf '%s\t%s\t%s\t%s\n' "$name" "${took:-$secs}" "${execs:-?}" "$crashes" >>"$out/summary.tsv"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "FUZZ FAILED: ${failed[*]}"
    exit 1
fi
