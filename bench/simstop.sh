#!/usr/bin/env bash
# Stopped processes on the simulated GPU (simulated): how often a SIGSTOP of one client at a
# random moment stalls every other client of its virtual GPU, because the stop caught it
# inside the device lock (docs/sim.md). Runs build/bench/simstop for short and longer
# kernels, with control windows (nobody stopped) beside the stops. Writes
# docs/results/simstop.md.
#
#   bash bench/simstop.sh             (make bench runs it)
#   STOPS=100 OUT=/tmp/s.md bash bench/simstop.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STOPS=${STOPS:-200}
OUT=${OUT:-docs/results/simstop.md}
BIN=build/bench/simstop
export LD_LIBRARY_PATH=build/sim
[ -x "$BIN" ] || { echo "bench: build first (make build/bench/simstop)" >&2; exit 1; }

field() { # field JSON KEY
    sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"
}

rows=()
raw=()
for us in 50 500; do
    echo "bench: simstop, 4 clients, ${us} us kernels, $STOPS stops..." >&2
    cmd="$BIN -n 4 -k $STOPS -w 150 -x 100 -d $us -s 1"
    j=$(POS_SIM_INSTANCE="bench-simstop-$$-$us" $cmd)
    raw+=("$j")
    rows+=("| $us | $(field "$j" stops) | **$(field "$j" stalls)** ($(awk -v r="$(field "$j" stall_rate)" 'BEGIN {printf "%.1f%%", 100 * r}')) | $(field "$j" worst_gap_ms) | $(field "$j" held_by_main) / $(field "$j" held_by_agent) / $(field "$j" held_by_other) | $(field "$j" control_stalls) of $(field "$j" control_windows) | $(field "$j" control_worst_gap_ms) | \`$cmd\` |")
done

# what the figures say, from the figures
other=0 control=0 stalls=0
for j in "${raw[@]}"; do
    other=$((other + $(field "$j" held_by_other)))
    control=$((control + $(field "$j" control_stalls)))
    stalls=$((stalls + $(field "$j" stalls)))
done
if [ "$stalls" -gt 0 ] && [ "$other" -eq 0 ]; then
    summary="In every one of the $stalls stalls the stopped process held the device lock."
else
    summary="$other of the $stalls stalls had the lock held by another process, or by nobody."
fi
summary="$summary $control control windows had a 100 ms gap."

cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
cat >"$OUT" <<EOF
# Stopped processes on the simulated GPU

**Simulated.** Produced by \`bash bench/simstop.sh\` (or \`make bench\`) on
$(date -u +%Y-%m-%d), $(nproc) cores ($cpu), kernel $(uname -r), commit
$(git rev-parse --short HEAD 2>/dev/null || echo unknown), a machine shared with other jobs.

Four processes share one virtual GPU (xavier-nx, timeslice), each launching four kernels and
synchronising in a loop. $STOPS times, after a random 2-20 ms, one client chosen at random is
stopped with SIGSTOP for 150 ms while the others' progress is sampled every 0.5 ms, then
continued; a **stall** is a stop during which none of the other three finished a loop for
100 ms or more. After each stop comes a control window of the same length with nobody
stopped, which shows the gaps the machine's own scheduling makes. For each stall, the thread
that held the device lock at the end of the window: the stopped client's main thread (in a
launch or synchronisation), its driver agent thread, or another process.

| kernel (us) | stops | stalls | longest gap (ms) | lock held by main / agent / other | control windows with a 100 ms gap | longest control gap (ms) | command |
|---|---|---|---|---|---|---|---|
$(printf '%s\n' "${rows[@]}")

$summary
What this means for tests and benchmarks, and why the driver does not take the lock away
from a stopped process, is in [docs/sim.md](../sim.md) ("A process stopped inside the device
lock").

Raw:
$(printf '%s\n\n' "${raw[@]}")
EOF
echo "bench: wrote $OUT" >&2
