#!/usr/bin/env bash
# Shim benchmark (simulated driver): what libposshim.so adds to each launch in passthrough,
# in time (median of per-launch medians, with and without the shim alternating in one run)
# and in instructions (callgrind, deterministic), what completion markers and the timing events
# behind them (device times) cost, and the shim's memory. Writes docs/results/shim.md.
#
#   bash bench/shim.sh                 (make bench runs it)
#   REPS=9 OUT=/tmp/s.md bash bench/shim.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-11}
OUT=${OUT:-docs/results/shim.md}
N=${N:-5000} # launches per microbench run: below the simulated queue's 8192, so none waits
# launches of the runs with a marker behind every launch: long enough that the shim's timing
# events are set up (a few ms after the first marker) for nearly all of them
N_SAMPLED=${N_SAMPLED:-50000}
APP=build/posapp
SHIM=build/libposshim.so
export LD_LIBRARY_PATH=build/sim POS_SIM_INSTANCE=bench-shim-$$
[ -x "$APP" ] && [ -f "$SHIM" ] || { echo "bench: build first (make)" >&2; exit 1; }

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

declare -A p50 mean
configs=(plain shim shim_sample1 shim_sample1_nodevtime shim_nomarkers shim_off)
run_config() { # config -> JSON of one microbench run
    case $1 in
    plain) "$APP" --microbench "$N" ;;
    shim) LD_PRELOAD=$SHIM "$APP" --microbench "$N" ;;
    shim_sample1) LD_PRELOAD=$SHIM POS_SAMPLE=1 "$APP" --microbench "$N_SAMPLED" ;;
    shim_sample1_nodevtime) LD_PRELOAD=$SHIM POS_SAMPLE=1 POS_DEVTIME=0 "$APP" --microbench "$N_SAMPLED" ;;
    shim_nomarkers) LD_PRELOAD=$SHIM POS_SAMPLE=0 "$APP" --microbench "$N" ;;
    shim_off) LD_PRELOAD=$SHIM POS_MODE=off "$APP" --microbench "$N" ;;
    esac
}
echo "bench: microbench x $REPS..." >&2
for ((r = 0; r < REPS; r++)); do
    for c in "${configs[@]}"; do
        j=$(run_config "$c")
        p50[$c]+="$(field "$j" launch_ns_p50) "
        mean[$c]+="$(field "$j" launch_ns_mean) "
    done
done
declare -A med medmean
for c in "${configs[@]}"; do
    med[$c]=$(tr ' ' '\n' <<<"${p50[$c]}" | grep . | median)
    medmean[$c]=$(tr ' ' '\n' <<<"${mean[$c]}" | grep . | median)
done
added() { awk -v a="${med[$1]}" -v b="${med[plain]}" 'BEGIN {printf "%+.0f", a - b}'; }

echo "bench: callgrind..." >&2
cg() { # file -> inclusive instructions and calls of the named function in the named source
    callgrind_annotate --inclusive=yes --tree=calling "$1" 2>/dev/null |
        awk -v want="$2" '!done && $0 ~ /\*  / && index($0, want) {gsub(",", "", $1); print $1; done = 1}'
}
CG=$(mktemp -d)
trap 'rm -rf "$CG"' EXIT # a failed run leaves nothing either
# valgrind runs a private copy of the driver: a posd with eBPF telemetry (any posd of this
# machine, a test's included) puts uprobes on build/sim/libcuda.so.1, and valgrind delivers
# their breakpoints to the program as SIGTRAP (docs/sim.md, "Valgrind ... beside posd's
# telemetry"); a copy is another file, which no uprobe covers.
mkdir -p "$CG/driver" && cp build/sim/libcuda.so.1 "$CG/driver/"
callgrind() { # out-file, then the command
    local out=$1
    shift
    if ! LD_LIBRARY_PATH=$CG/driver valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$@" >"$CG/log" 2>&1; then
        echo "bench: callgrind of $* failed:" >&2
        tail -5 "$CG/log" >&2
        exit 1
    fi
}
ir_added() { # POS_SAMPLE value [POS_DEVTIME] -> instructions the shim adds per launch
    LD_PRELOAD=$SHIM POS_SAMPLE=$1 POS_DEVTIME=${2:-1} callgrind "$CG/s$1" "$APP" --microbench "$N"
    local a b
    a=$(cg "$CG/s$1" "shim/launch.c:cuLaunchKernel")
    b=$(cg "$CG/s$1" "sim/driver/api_launch.c:cuLaunchKernel [")
    awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN {printf "%.0f", (a - b) / n}'
}
ir_nomarkers=$(ir_added 0)
ir_default=$(ir_added 32)
callgrind "$CG/plain" "$APP" --microbench "$N"
sim_incl_plain=$(cg "$CG/plain" "sim/driver/api_launch.c:cuLaunchKernel [")
ir_driver=$(awk -v b="$sim_incl_plain" -v n="$N" 'BEGIN {printf "%.0f", b / n}')
rm -rf "$CG"

echo "bench: memory..." >&2
rss() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }
rss_plain=() rss_shim=() rss_trace=()
TR=$(mktemp)
for ((r = 0; r < 3; r++)); do
    rss_plain+=("$(rss "$APP" --model resnet50 --requests 30)")
    rss_shim+=("$(LD_PRELOAD=$SHIM rss "$APP" --model resnet50 --requests 30)")
    rss_trace+=("$(LD_PRELOAD=$SHIM POS_TRACE=$TR rss "$APP" --model resnet50 --requests 30)")
done
rm -f "$TR"
m_plain=$(printf '%s\n' "${rss_plain[@]}" | median)
m_shim=$(printf '%s\n' "${rss_shim[@]}" | median)
m_trace=$(printf '%s\n' "${rss_trace[@]}" | median)

cpu=$(sed -n 's/^model name[ \t]*: //p' /proc/cpuinfo | head -1)
cat >"$OUT" <<EOF
# libposshim.so: cost per launch and memory

**Simulated driver.** Produced by \`bash bench/shim.sh\` (or \`make bench\`) on $(date -u +%Y-%m-%d),
$(nproc) cores ($cpu), kernel $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown).
The launches go to the simulated driver (\`build/sim/libcuda.so.1\`), so "driver" below means
its cost, not NVIDIA's. Mode: passthrough (no scheduler), the default without posd.

## Time added per launch

\`posapp --microbench $N\` times every cuLaunchKernel call (clock_gettime around it); each run
reports the median. The configurations alternate, $REPS runs each, in one session; the table
gives the median of the runs' medians (and of their means).

| configuration | median ns/launch | added vs. no shim | mean ns/launch |
|---|---|---|---|
| no shim | ${med[plain]} | | ${medmean[plain]} |
| shim, passthrough (marker every 32nd launch, the default) | ${med[shim]} | **$(added shim)** | ${medmean[shim]} |
| shim, a marker and its timing event after every launch (POS_SAMPLE=1, the default with POS_TRACE; $N_SAMPLED launches) | ${med[shim_sample1]} | $(added shim_sample1) | ${medmean[shim_sample1]} |
| shim, a marker after every launch without its timing event (POS_SAMPLE=1 POS_DEVTIME=0; $N_SAMPLED launches) | ${med[shim_sample1_nodevtime]} | $(added shim_sample1_nodevtime) | ${medmean[shim_sample1_nodevtime]} |
| shim, no completion markers (POS_SAMPLE=0) | ${med[shim_nomarkers]} | $(added shim_nomarkers) | ${medmean[shim_nomarkers]} |
| shim, POS_MODE=off | ${med[shim_off]} | $(added shim_off) | ${medmean[shim_off]} |

Per-run medians (ns): no shim ${p50[plain]}; shim ${p50[shim]}; POS_SAMPLE=1 ${p50[shim_sample1]};
POS_SAMPLE=1 POS_DEVTIME=0 ${p50[shim_sample1_nodevtime]}; POS_SAMPLE=0 ${p50[shim_nomarkers]};
off ${p50[shim_off]}.

Target: at most 100 ns added median per launch in passthrough.

A completion marker is one more driver call (\`cuStreamWriteValue32\`) behind the launch, and
its timing event (device times, shim/devtime.c) one more (\`cuEventRecord\`) before it: with
the default sampling they leave the median alone and add about 1/32 of two driver calls to the
mean; with a marker after every launch they add two driver calls to every launch. A sampled
launch's timing event costs $(awk -v a="${med[shim_sample1]}" -v b="${med[shim_sample1_nodevtime]}" 'BEGIN {printf "%+.0f", a - b}') ns median (POS_SAMPLE=1 against POS_SAMPLE=1 POS_DEVTIME=0,
side by side, $N_SAMPLED launches each, so that the events are set up for nearly all: in a run
of $N launches they are not yet, and under callgrind never, so the instruction counts below
hold no timing event; with every launch sampled the microbench also runs its 1,024 events per
context out, said once, and the launches beyond go without), and no unsampled launch pays
anything for it (the instruction counts below, against the ones before device times: 220
without markers, 249 by default, docs/results/shim.md at commit 92711ec).

## Instructions added per launch (callgrind)

\`valgrind --tool=callgrind posapp --microbench $N\`, with and without the shim. Inclusive
instructions of the shim's cuLaunchKernel minus those of the driver's cuLaunchKernel it calls,
over $N launches: everything the shim does per launch. Without markers the count is
deterministic; with the
default sampling it also holds the amortised marker calls, whose number depends on how soon
the collector registered the marker memory.

| | instructions per launch |
|---|---|
| added by the shim, no completion markers (POS_SAMPLE=0) | **$ir_nomarkers** |
| added by the shim, default (a marker every 32nd launch) | $ir_default |
| the simulated driver's cuLaunchKernel, for scale | $ir_driver |

Target: at most 300.

## Memory

Peak RSS (\`/usr/bin/time -f %M\`) of \`posapp --model resnet50 --requests 30\`, median of 3:

| | peak RSS (KiB) | added |
|---|---|---|
| no shim | $m_plain | |
| shim, passthrough | $m_shim | $((m_shim - m_plain)) |
| shim with POS_TRACE | $m_trace | $((m_trace - m_plain)) |

The shim reserves address space for 256 threads' record rings (16384 records of 104 bytes
each), backed only as threads launch; the kernel-name map is 1 MiB of static data.
EOF
echo "bench: wrote $OUT" >&2
