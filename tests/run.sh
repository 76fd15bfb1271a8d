#!/usr/bin/env bash
# Runs every test binary given on the command line from the repository root, each with its
# own virtual GPU instance, and fails if any of them fails. CUnit's Run Summary of each is
# printed; a final line counts the binaries that passed.
set -u
cd "$(dirname "$0")/.."
# Hermetic: nothing the caller exported (POS_SOCKET of a posd they run, POS_MODE, POS_TRACE,
# LD_PRELOAD...) reaches the tests; a test that wants a posd starts its own on its own socket,
# and none finds a system posd at the default path.
# POS_TEST_* is the harness's own (make test SANITIZE=... passes the sanitizer's runtime in
# POS_TEST_SAN_RUNTIME, and in POS_TEST_TIME_SCALE how many times slower its programs run):
# kept, or a sanitized shim could not be preloaded.
for v in $(compgen -e); do
    case $v in POS_TEST_*) ;; POS_* | POSD_*) unset "$v" ;; esac
done
unset LD_PRELOAD
export POS_SOCKET=/nonexistent/pos-tests-start-their-own-posd.sock
# every posd a test starts keeps its kernel profiles here, never in /var/lib/posd
POSD_STATE_DIR=$(mktemp -d /tmp/pos-tests-state.XXXXXX)
export POSD_STATE_DIR
trap 'rm -rf "$POSD_STATE_DIR"' EXIT
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
