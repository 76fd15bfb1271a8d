#!/usr/bin/env bash
# Memory ledger benchmark (simulated driver): what the ledger adds to an allocation and its free
# on each path (median of per-run medians of allocate/free pairs, with and without the shim
# alternating in one run), and whether it moved the launch path (callgrind instructions per
# launch, against BASELINE's shim when given). Writes docs/results/memory.md.
#
#   bash bench/memory.sh                          (make bench-memory runs it)
#   BASELINE=/tmp/base/build REPS=5 bash bench/memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-7}
N=${N:-2000} # allocate/free pairs per run
SIZE=${SIZE:-2097152}
OUT=${OUT:-docs/results/memory.md}
PROG=build/tests/shim_memload
SHIM=build/libposshim.so
[ -x "$PROG" ] && [ -f "$SHIM" ] && [ -x build/posd ] || { echo "bench: build first (make all build/tests/shim_memload)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/pos-bench-memory.XXXXXX)
export LD_LIBRARY_PATH=build/sim POS_SIM_INSTANCE=bench-memory-$$ POS_SOCKET=$DIR/posd.sock
POSD=
cleanup() {
    [ -n "$POSD" ] && kill "$POSD" 2>/dev/null && wait "$POSD" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
cat >"$DIR/posd.conf" <<'EOF'
[rule capped]
match_app = bench-capped
mem_limit = 8G
EOF
build/posd -f -c "$DIR/posd.conf" -s "$POS_SOCKET" 2>"$DIR/posd.log" &
POSD=$!
for _ in $(seq 200); do [ -S "$POS_SOCKET" ] && break; sleep 0.01; done
[ -S "$POS_SOCKET" ] || { echo "bench: posd did not start:" >&2; cat "$DIR/posd.log" >&2; exit 1; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
paths=(linear pitched managed async pool vmm array)
configs=(plain shim_alone shim_posd)
run() { # config path -> median ns of one run
    case $1 in
    plain) "$PROG" cost "$2" "$SIZE" "$N" ;;
    shim_alone) POS_SOCKET=$DIR/none.sock LD_PRELOAD=$SHIM "$PROG" cost "$2" "$SIZE" "$N" 2>/dev/null ;;
    shim_posd) POS_APP=bench-capped LD_PRELOAD=$SHIM "$PROG" cost "$2" "$SIZE" "$N" ;;
    esac | sed -n 's/^median_ns //p'
}
declare -A runs
echo "bench: $REPS x ${#paths[@]} paths x ${#configs[@]} configurations of $N pairs..." >&2
for ((r = 0; r < REPS; r++)); do
    for p in "${paths[@]}"; do
        for c in "${configs[@]}"; do
            runs[$c.$p]+="$(run "$c" "$p") "
        done
    done
done
# the ledger really was in force for shim_posd: posd gave the client its limit
grep -q "app 'bench-capped'" "$DIR/posd.log" || { echo "bench: the capped client never registered" >&2; exit 1; }
declare -A med
rows=""
worst=0
for p in "${paths[@]}"; do
    for c in "${configs[@]}"; do
        med[$c.$p]=$(tr ' ' '\n' <<<"${runs[$c.$p]}" | grep . | median)
    done
    add_alone=$(awk -v a="${med[shim_alone.$p]}" -v b="${med[plain.$p]}" 'BEGIN {printf "%+.0f", a - b}')
    add_posd=$(awk -v a="${med[shim_posd.$p]}" -v b="${med[plain.$p]}" 'BEGIN {printf "%+.0f", a - b}')
    worst=$(awk -v w="$worst" -v a="$add_posd" 'BEGIN {print (a > w ? a : w)}')
    rows+="| $p | ${med[plain.$p]} | ${med[shim_alone.$p]} | $add_alone | ${med[shim_posd.$p]} | **$add_posd** |"$'\n'
done

echo "bench: callgrind..." >&2
CG=$DIR/cg
mkdir -p "$CG/driver" && cp build/sim/libcuda.so.1 "$CG/driver/"
cg() { # file function -> its inclusive instructions
    callgrind_annotate --inclusive=yes --tree=calling "$1" 2>/dev/null |
        awk -v want="$2" '!done && $0 ~ /\*  / && index($0, want) {gsub(",", "", $1); print $1; done = 1}'
}
LAUNCHES=5000
ir_per_launch() { # shim library -> instructions it adds per launch, no markers (deterministic)
    POS_SOCKET=$DIR/none.sock LD_PRELOAD=$1 POS_SAMPLE=0 LD_LIBRARY_PATH=$CG/driver \
        valgrind --tool=callgrind --callgrind-out-file="$CG/out" build/posapp --microbench $LAUNCHES >/dev/null 2>"$CG/log" ||
        { echo "bench: callgrind failed:" >&2; tail -5 "$CG/log" >&2; exit 1; }
    local a b
    a=$(cg "$CG/out" "shim/launch.c:cuLaunchKernel")
    b=$(cg "$CG/out" "sim/driver/api_launch.c:cuLaunchKernel [")
    awk -v a="$a" -v b="$b" -v n=$LAUNCHES 'BEGIN {printf "%.1f", (a - b) / n}'
}
ir_now=$(ir_per_launch "$SHIM")
ir_base=""
if [ -n "${BASELINE:-}" ]; then
    ir_base=$(ir_per_launch "$BASELINE/libposshim.so")
fi

cpu=$(sed -n 's/^model name[ \t]*: //p' /proc/cpuinfo | head -1)
cat >"$OUT" <<EOF
# The memory ledger: what it costs

**Simulated driver.** Produced by \`bash bench/memory.sh\` (\`make bench-memory\`) on $(date -u +%Y-%m-%d),
$(nproc) cores ($cpu), kernel $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown).
The allocations go to the simulated driver (\`build/sim/libcuda.so.1\`), so "driver" below means
its cost, not NVIDIA's (a real \`cuMemAlloc\` takes tens of microseconds or more).

## Time added per allocation and free

\`build/tests/shim_memload cost PATH $SIZE $N\` times $N allocate/free pairs of $SIZE bytes by
each path (\`tests/shim/prog_memload.c\`; the stream-ordered paths include the synchronisation
after each) and prints the median pair. Configurations alternate path by path, $REPS runs each,
in one session; the table gives the median of the runs' medians, in ns:

- *no shim*: the simulated driver alone;
- *shim, no posd*: the shim keeps its account, with no limit (no posd answers);
- *shim + posd, limit*: a client of a posd whose rule gives it \`mem_limit = 8G\`: every
  allocation reserves against the limit in the client's shared memory before the driver call
  and commits after it, and the free releases it.

| path | no shim | shim, no posd | added | shim + posd, limit | added |
|---|---|---|---|---|---|
$rows
Target: an allocation under the ledger costs at most 2 us (2000 ns) more than without pos,
median. Worst path here: **$worst ns** added per allocate/free pair (both calls together).
Per-run medians are in the script's stderr when it is run with \`bash -x\`; the spread of
these figures on this 2-core VM is a few hundred ns from run to run.

## The launch path

Instructions the shim adds per \`cuLaunchKernel\` (callgrind, \`posapp --microbench $LAUNCHES\`,
no completion markers: deterministic), inclusive instructions of the shim's cuLaunchKernel
minus the driver's:

| shim | instructions per launch |
|---|---|
| this commit | **$ir_now** |
${ir_base:+| the baseline (\`BASELINE=$BASELINE\`) | $ir_base |}

Target: unchanged (the ledger is not on the launch path: its wrappers are only the memory
entry points).
EOF
echo "bench: wrote $OUT" >&2
