#!/usr/bin/env bash
# make memcheck: posd under valgrind's memcheck through an integration run: verifying clients
# of several shapes under the shim, posstat, a reload (SIGHUP), posd's clients killed, every
# hostile case for a second (as uid 65534 when run as root), then SIGTERM. Fails when memcheck
# reports an error or a definite or indirect leak (--errors-for-leak-kinds=definite,indirect).
# The report: build/memcheck/posd.valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/memcheck
mkdir -p "$out"
T=$(mktemp -d /tmp/pos-memcheck.XXXXXX)
chmod 711 "$T"
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock POS_SIM_INSTANCE=memcheck-$$
printf '[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n[rule capped]\nmatch_app = capped*\nclass = batch\nmax_inflight = 1\n' >"$T/posd.conf"
install -m 0755 build/tests/hostile "$T/hostile"
valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --show-leak-kinds=definite,indirect --error-exitcode=99 --log-file="$out/posd.valgrind" \
    build/posd -f -c "$T/posd.conf" -s "$POS_SOCKET" 2>"$out/posd.log" &
vg=$!
trap 'kill $vg 2>/dev/null || true; rm -rf "$T" "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"' EXIT
for _ in $(seq 500); do build/posstat -o json >/dev/null 2>&1 && break; sleep 0.05; done
client() { POS_APP=$1 LD_PRELOAD=build/libposshim.so exec build/posapp --model resnet18 --verify "${@:2}"; }
pids=()
client app --requests 40 >"$T/c1" & pids+=($!)
client batch --requests 40 --threads 2 --streams 2 >"$T/c2" & pids+=($!)
client capped --requests 20 --ptds >"$T/c3" & pids+=($!)
client app --requests 100000 >"$T/c4" & victim=$!
sleep 1
build/posstat -o json >/dev/null
kill -HUP $vg # valgrind runs posd in its own process
kill -KILL $victim
for p in "${pids[@]}"; do wait "$p"; done
wait $victim 2>/dev/null || true
if [ "$(cat "$T"/c1 "$T"/c2 "$T"/c3 | grep -c '"verified":true')" != 3 ]; then
    echo "memcheck: a client did not verify" >&2
    exit 1
fi
as_nobody() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
for c in $(build/tests/hostile --list); do
    as_nobody "$T/hostile" "$POS_SOCKET" "$c" 1 >/dev/null 2>&1 || echo "memcheck: hostile $c: $?"
done
sleep 2.5 # idle connections time out
build/posstat -o json >/dev/null
kill -TERM $vg
rc=0
wait $vg || rc=$?
grep -E 'ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable' "$out/posd.valgrind" || true
if [ $rc -ne 0 ]; then
    echo "memcheck: posd under valgrind exited $rc (report: $out/posd.valgrind)" >&2
    exit 1
fi
echo "memcheck: clean (report: $out/posd.valgrind)"
