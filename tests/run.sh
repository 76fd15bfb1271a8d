#!/usr/bin/env bash
# Runs every test binary given on the command line from the repository root, each with its
# own virtual GPU instance, and fails if any of them fails. CUnit's Run Summary of each is
# printed; a final line counts the binaries that passed.
set -u
cd "$(dirname "$0")/.."
failed=()
for t in "$@"; do
    echo "=== $t"
    if ! POS_SIM_INSTANCE="test-$(basename "$t")-$$" timeout 900 "$t"; then
        failed+=("$t")
    fi
done
echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all $# test binaries passed"
