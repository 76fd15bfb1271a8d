#!/usr/bin/env bash
# Calibration of possim's host model ([host] in docs/possim.md): what the real parts cost the
# CPU on this machine, per launch, per collector pass, per synchronisation and per posd
# wake-up. Each figure is the median of REPS runs with its range. Writes docs/results/hostcal.md.
#
#   bash bench/hostcal.sh               (make bench-hostcal runs it)
#   REPS=3 OUT=/tmp/h.md bash bench/hostcal.sh
#
# What is measured (CPU time is the kernel's: /proc/PID/task/TID/schedstat's run time, and its
# count of times on a CPU; /proc/PID/stat's utime+stime for a whole process):
#   driver_us     posapp --microbench on the simulated driver without the shim: the process's
#                 CPU per launch (the launch call, the device lock, the model's work and the
#                 agent thread's), from two lengths (N and N/10) so start-up cancels
#   shim_us       the same under libposshim.so with posd (policy priority): CPU per launch
#                 with the shim's submit path and its collector; shim_us - driver_us is the
#                 shim's share (possim's [client] launch_us)
#   collector_us  posapp resnet50 (closed loop) under the shim with posd: the collector
#                 thread's CPU per time on a CPU (each pass ends in a sleep)
#   agent_us      the same run's driver agent thread: CPU per wake-up (possim's agent_us, and
#                 its sync_us: a waiting thread's wake-up taken as costing the same)
#   launch_all_us the same run's launching thread: its CPU per request over the model's ops
#                 (possim's driver_us is this less launch_us 2 and sync_us per op, so that
#                 a request costs the launching thread in possim what it did here)
#   decide_us     posd's CPU per wake-up over that run: utime+stime over its voluntary
#                 context switches (each wake-up of its loop ends in one)
#   device_us     the same run's device process (pos-sim-device, the virtual GPU's owner):
#                 CPU per time on a CPU (each look ends in a sleep): possim's device_us
#   looks_per_req its times on a CPU per request, for context
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
N=${N:-200000}
REQS=${REQS:-150}
OUT=${OUT:-docs/results/hostcal.md}
T=$(mktemp -d)
POSD_PID=
cleanup() {
    [ -n "$POSD_PID" ] && kill "$POSD_PID" 2>/dev/null
    jobs -p | xargs -r kill 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
APP=build/posapp SHIM=build/libposshim.so POSD=build/posd
for f in $APP $SHIM $POSD build/sim/libcuda.so.1; do
    [ -e "$f" ] || { echo "bench-hostcal: build first (make)" >&2; exit 1; }
done
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock POS_SIM_INSTANCE=hostcal$$
: >"$T/posd.conf"
. bench/lib.sh
HZ=$(getconf CLK_TCK)

median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
range() { grep -v nan | sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.3g-%.3g", lo, hi}'; }

# CPU seconds (utime+stime) of a command and all it waited for.
cpu_of() {
    /usr/bin/time -f "%U %S" -o "$T/time" "$@" >/dev/null
    awk '{print $1 + $2}' "$T/time"
}

# CPU us per launch of posapp --microbench, from N and N/10 launches; ARGS before the command.
per_launch() { # env-assignments...
    local big small
    big=$(cpu_of env "$@" $APP --microbench "$N")
    small=$(cpu_of env "$@" $APP --microbench $((N / 10)))
    awk -v b="$big" -v s="$small" -v n="$N" 'BEGIN {printf "%.3f\n", (b - s) / (0.9 * n) * 1e6}'
}

# Every thread of PID: "tid run_ns timeslices", sampled until it exits (the last sample).
watch_threads() { # pid file
    while kill -0 "$1" 2>/dev/null; do
        local snap=""
        for d in /proc/"$1"/task/*; do
            [ -r "$d/schedstat" ] || continue
            snap+="${d##*/} $(cat "$d/schedstat" 2>/dev/null)"$'\n'
        done
        [ -n "$snap" ] && printf '%s' "$snap" >"$2"
        sleep 0.05
    done
}

posd_cpu() { # pid: "cpu_s voluntary_switches"
    local s v
    s=$(awk '{print ($14 + $15)}' "/proc/$1/stat")
    v=$(awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$1/status")
    awk -v s="$s" -v hz="$HZ" -v v="$v" 'BEGIN {print s / hz, v}'
}

declare -A V
add() { V[$1]+="$2 "; }
OPS=$(grep -c '^op ' sim/models/resnet50.model)

for r in $(seq "$REPS"); do
    add driver_us "$(per_launch POS_X=1)"
    posd_up priority
    add shim_us "$(per_launch LD_PRELOAD=$SHIM POS_APP=cal)"
    base=$(posd_cpu "$POSD_PID")
    POS_APP=cal LD_PRELOAD=$SHIM $APP --model resnet50 --requests "$REQS" >"$T/app.json" &
    app=$!
    watch_threads "$app" "$T/threads" &
    w=$!
    dev=
    for _ in $(seq 100); do
        dev=$(pgrep -f "^[^ ]*pos-sim-device /pos-sim\.$(id -u)\.$POS_SIM_INSTANCE\$" | head -1) && break
        sleep 0.02
    done
    : >"$T/device"
    [ -n "$dev" ] && { watch_threads "$dev" "$T/device" & }
    wait "$app"
    wait "$w" || true
    sleep 0.3 # the device process leaves with the last process of its GPU
    after=$(posd_cpu "$POSD_PID")
    posd_down
    add decide_us "$(awk -v a="$base" -v b="$after" 'BEGIN {split(a, x, " "); split(b, y, " ");
        if (y[2] > x[2]) printf "%.2f\n", (y[1] - x[1]) / (y[2] - x[2]) * 1e6; else print "-"}')"
    # the launching thread is the main one (tid = pid); of the others, the collector is on a
    # CPU most often (every poll_us while records are pending), the agent next
    main=$(awk -v p="$app" '$1 == p' "$T/threads")
    others=$(awk -v p="$app" '$1 != p' "$T/threads" | sort -k4,4 -gr)
    coll=$(sed -n 1p <<<"$others") agent=$(sed -n 2p <<<"$others")
    add collector_us "$(awk '{printf "%.2f\n", $2 / $4 / 1e3}' <<<"$coll")"
    add agent_us "$(awk '{if ($4) printf "%.2f\n", $2 / $4 / 1e3; else print "-"}' <<<"$agent")"
    add main_per_req_us "$(awk -v n="$REQS" '{printf "%.1f\n", $2 / 1e3 / n}' <<<"$main")"
    add device_us "$(awk '{r += $2; k += $4} END {if (k) printf "%.2f\n", r / k / 1e3; else print "-"}' "$T/device")"
    add looks_per_req "$(awk -v n="$REQS" '{k += $4} END {if (k) printf "%.1f\n", k / n; else print "-"}' "$T/device")"
    add launch_all_us "$(awk -v n="$REQS" -v ops="$OPS" '{printf "%.2f\n", $2 / 1e3 / n / ops}' <<<"$main")"
    add coll_share "$(awk -v c="$coll" -v m="$main" 'BEGIN {split(c, x, " "); split(m, y, " ");
        printf "%.3f\n", x[2] / y[2]}')"
done

row() { # key meaning
    local m rg
    m=$(tr ' ' '\n' <<<"${V[$1]}" | grep -v '^-\?$' | median)
    rg=$(tr ' ' '\n' <<<"${V[$1]}" | grep -v '^-\?$' | range)
    printf '| `%s` | %s | %s | %s |\n' "$1" "$m" "$rg" "$2"
}
report() {
    echo "# possim host calibration"
    echo
    echo "Written by \`bash bench/hostcal.sh\` (\`make bench-hostcal\`) on $(date -u +%Y-%m-%d) with"
    echo "REPS=$REPS N=$N REQS=$REQS, on this development machine: $(nproc) online CPUs,"
    echo "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), a **shared VM**"
    echo "(another engineer's builds and tests ran beside it): the figures are noisy."
    echo "Real processes (posapp, libposshim.so, posd on the simulated driver); CPU time from"
    echo "the kernel (/proc). Median of REPS runs, and the range."
    echo
    echo "| figure | median us | range | what |"
    echo "|---|---|---|---|"
    row driver_us "CPU per launch, posapp --microbench on the simulated driver, no shim (launch call, device lock, the model's work, the agent's)"
    row shim_us "the same under the shim with posd (priority): the shim's submit path and its collector too"
    row collector_us "the shim collector's CPU per time on a CPU (one pass), resnet50 closed loop under posd"
    row main_per_req_us "the launching thread's CPU per request, resnet50 closed loop ($OPS ops) under posd"
    row launch_all_us "the same over the request's ops: the launching thread's CPU per launch, in all"
    row agent_us "the driver agent thread's CPU per wake-up, same run"
    row coll_share "the collector's CPU over the launching thread's, same run (a ratio)"
    row decide_us "posd's CPU per wake-up (utime+stime over voluntary context switches), same run"
    row device_us "the device process's (pos-sim-device) CPU per time on a CPU (one look), same run"
    row looks_per_req "the device process's times on a CPU per request, same run"
    echo
    local la ag
    la=$(tr ' ' '\n' <<<"${V[launch_all_us]}" | grep -v '^-\?$' | median)
    ag=$(tr ' ' '\n' <<<"${V[agent_us]}" | grep -v '^-\?$' | median)
    echo "possim's [host] defaults (tools/possim_scenario.h, as \`build/possim --help\` shows them)"
    echo "against what this run measured for them:"
    echo
    echo "| [host] key | default | this run | from |"
    echo "|---|---|---|---|"
    def() { build/possim --help | sed -n "s/^  $1 = \([0-9.]*\) .*/\1/p" | head -1; }
    med() { tr ' ' '\n' <<<"${V[$1]}" | grep -v '^-\?$' | median; }
    local drv
    drv=$(awk -v la="$la" -v ag="$ag" -v ops="$OPS" 'BEGIN {d = la - 2 - ag / ops; printf "%.1f", (d < 0 ? 0 : d)}')
    echo "| \`driver_us\` | $(def driver_us) | $drv | launch_all_us - launch_us (2) - sync_us / $OPS ops, at least 0 |"
    echo "| \`sync_us\` | $(def sync_us) | $ag | agent_us: a synchronisation's return on the waiting thread (its own wake-up, taken as the agent's) |"
    echo "| \`collector_us\` | $(def collector_us) | $(med collector_us) | collector_us |"
    echo "| \`decide_us\` | $(def decide_us) | $(med decide_us) | decide_us |"
    echo "| \`device_us\` | $(def device_us) | $(med device_us) | device_us: a look of the device process |"
    echo "| \`agent_us\` | $(def agent_us) | $ag | agent_us: a wake-up of the process's driver agent after a look |"
    echo
    echo "The defaults were set from an earlier run of this bench (2026-12-02); the costs move from"
    echo "run to run with the machine's load (the ranges above, and by up to a third between runs)."
    echo
    echo "driver_us (the microbench, tiny kernels) is the driver's part alone; shim_us - driver_us"
    echo "what the shim's submit path and collector add per launch of a microbench."
}
report >"$OUT"
cat "$OUT"
