#!/usr/bin/env bash
# Stopped processes on the simulated GPU (simulated): how often a SIGSTOP of one client at a
# random moment stalls every other client of its virtual GPU, because the stop caught it
# inside the device lock (docs/sim.md). Runs build/bench/simstop for short and longer
# kernels, with control windows (nobody stopped) beside the stops. Writes
# docs/results/simstop.md.
#
#   bash bench/simstop.sh             (make bench runs it)
#   STOPS=100 OUT=/tmp/s.md bash bench/simstop.sh
#   BASELINE=/tmp/old-sim bash bench/simstop.sh   (also an older libcuda.so.1, side by side)
#   KERNELS="50" STOPS=800 CHUNKS=8 bash bench/simstop.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_STOPS=200 DEFAULT_CHUNKS=4 DEFAULT_KERNELS="50 500"
STOPS=${STOPS:-$DEFAULT_STOPS}
CHUNKS=${CHUNKS:-$DEFAULT_CHUNKS} # runs per library and kernel size, alternating between libraries
OUT=${OUT:-docs/results/simstop.md}
BASELINE=${BASELINE:-}
KERNELS=${KERNELS:-$DEFAULT_KERNELS} # kernel durations (us) to run
BIN=build/bench/simstop
[ -x "$BIN" ] || { echo "bench: build first (make build/bench/simstop)" >&2; exit 1; }

field() { # field JSON KEY
    sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"
}

libs=(build/sim)
[ -n "$BASELINE" ] && libs=("$BASELINE" build/sim)
rows=()
raw=()
per=$((STOPS / CHUNKS))
for us in $KERNELS; do
    declare -A st=() sto=() wg=() hm=() ha=() ho=() cs=() cw=() cwg=()
    for ((c = 0; c < CHUNKS; c++)); do
        for lib in "${libs[@]}"; do
            echo "bench: simstop, $lib, 4 clients, ${us} us kernels, $per stops (run $((c + 1))/$CHUNKS)..." >&2
            cmd="$BIN -n 4 -k $per -w 150 -x 100 -d $us -s $((c + 1))"
            j=$(LD_LIBRARY_PATH=$lib POS_SIM_INSTANCE="bench-simstop-$$-$us" $cmd)
            raw+=("$lib: $j")
            st[$lib]=$((${st[$lib]:-0} + $(field "$j" stalls)))
            sto[$lib]=$((${sto[$lib]:-0} + $(field "$j" stops)))
            hm[$lib]=$((${hm[$lib]:-0} + $(field "$j" held_by_main)))
            ha[$lib]=$((${ha[$lib]:-0} + $(field "$j" held_by_agent)))
            ho[$lib]=$((${ho[$lib]:-0} + $(field "$j" held_by_other)))
            cs[$lib]=$((${cs[$lib]:-0} + $(field "$j" control_stalls)))
            cw[$lib]=$((${cw[$lib]:-0} + $(field "$j" control_windows)))
            wg[$lib]=$(awk -v a="${wg[$lib]:-0}" -v b="$(field "$j" worst_gap_ms)" 'BEGIN {print (b > a) ? b : a}')
            cwg[$lib]=$(awk -v a="${cwg[$lib]:-0}" -v b="$(field "$j" control_worst_gap_ms)" 'BEGIN {print (b > a) ? b : a}')
        done
    done
    for lib in "${libs[@]}"; do
        name="this build"
        [ "$lib" = "$BASELINE" ] && name="baseline ($lib)"
        rows+=("| $name | $us | ${sto[$lib]} | **${st[$lib]}** ($(awk -v s="${st[$lib]}" -v n="${sto[$lib]}" 'BEGIN {printf "%.1f%%", 100 * s / n}')) | ${wg[$lib]} | ${hm[$lib]} / ${ha[$lib]} / ${ho[$lib]} | ${cs[$lib]} of ${cw[$lib]} | ${cwg[$lib]} |")
    done
    unset st sto wg hm ha ho cs cw cwg
done

# what the figures say, from the figures
other=0 control=0 stalls=0
for r in "${raw[@]}"; do
    j=${r#*: }
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

invocation="bash bench/simstop.sh"
for v in STOPS CHUNKS KERNELS BASELINE; do
    [ -n "${!v}" ] && [ "${!v}" != "$(eval echo "\${DEFAULT_$v:-}")" ] && invocation="$v=\"${!v}\" $invocation"
done

cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
cat >"$OUT" <<EOF
# Stopped processes on the simulated GPU

**Simulated.** Produced by \`$invocation\` on
$(date -u +%Y-%m-%d), $(nproc) cores ($cpu), kernel $(uname -r), commit
$(git rev-parse --short HEAD 2>/dev/null || echo unknown), a machine shared with other jobs.

Four processes share one virtual GPU (xavier-nx, timeslice), each launching four kernels and
synchronising in a loop. $STOPS times ($CHUNKS runs of
\`$BIN -n 4 -k $per -w 150 -x 100 -d KERNEL_US -s RUN\`$([ -n "$BASELINE" ] && echo ", alternating
with the same runs on the baseline library"); the baseline, where given, is the driver of another
build), after a random 2-20 ms, one client chosen at random is
stopped with SIGSTOP for 150 ms while the others' progress is sampled every 0.5 ms, then
continued; a **stall** is a stop during which none of the other three finished a loop for
100 ms or more. After each stop comes a control window of the same length with nobody
stopped, which shows the gaps the machine's own scheduling makes. For each stall, the thread
that held the device lock at the end of the window: the stopped client's main thread (in a
launch or synchronisation), its driver agent thread, or another process.

| library | kernel (us) | stops | stalls | longest gap (ms) | lock held by main / agent / other | control windows with a 100 ms gap | longest control gap (ms) |
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
