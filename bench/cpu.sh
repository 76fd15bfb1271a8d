#!/usr/bin/env bash
# make bench-cpu: the CPU lever ([policy] cpu, docs/policy.md) on make demo's mix: a detector
# (resnet18, Poisson arrivals, SLO) beside the resnet18+34+50 batch mix (batch 16, closed
# loops), four real processes under posd on the simulated GPU (h200, MPS). For each policy
# (BENCH_CPU_POLICIES, default "priority pos") and each lever (off, idle, nice = cpu_nice 19,
# idle-hold0 = idle with cpu_hold_ms = 0), and two static references that posd does not apply
# (cpu = off in posd): chrt = the batch processes started under `chrt -i 0` (SCHED_IDLE all
# run long, as the issue measured by hand), cgroup = the batch processes moved at their start
# into a cgroup v1 cpu group of cpu.shares 2 (root only, where /sys/fs/cgroup/cpu is v1),
# BENCH_CPU_ROUNDS rounds (default 3), the levers in a rotated order each round so that a
# drift of the machine's load spreads over all of them. Per run: the detector's SLO attainment
# and p99, the batch speedup (the sum of each batch model's req/s over its req/s alone), and
# the detector's run-queue delay as posd's eBPF telemetry saw it (posstat -o json: the mean
# wake-up-to-running wait of its launching threads, and the time they waited per second;
# "-" without telemetry, which needs root). Writes docs/results/cpu.md (BENCH_CPU_OUT):
# medians with min..max; then the same mix in possim for each policy and lever. Every figure
# is simulated (docs/sim.md).
set -euo pipefail
cd "$(dirname "$0")/.."
APP=build/posapp SHIM=$PWD/build/libposshim.so POSD=build/posd
POLICIES=${BENCH_CPU_POLICIES:-priority pos} ROUNDS=${BENCH_CPU_ROUNDS:-3}
REQ=${BENCH_CPU_REQUESTS:-1500} RATE=300 SLO=3 BATCH=16
OUT=${BENCH_CPU_OUT:-docs/results/cpu.md}
T=$(mktemp -d)
CG=/sys/fs/cgroup/cpu/pos-bench-cpu-$$ # the cgroup reference's group (cgroup v1)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"; rm -f "/dev/shm/pos-sim.$(id -u).bcpu-$$"
      [ -d "$CG" ] && { cat "$CG/cgroup.procs" 2>/dev/null | while read -r p; do
          echo "$p" >/sys/fs/cgroup/cpu/cgroup.procs; done; rmdir "$CG"; } 2>/dev/null || true' EXIT
# shellcheck source=bench/lib.sh
. bench/lib.sh
export LD_LIBRARY_PATH=$PWD/build/sim POS_SIM_DEVICE=h200 POS_SIM_MODE=mps
export POS_SIM_INSTANCE=bcpu-$$ POS_SOCKET=$T/posd.sock
names=(detector batch-resnet18 batch-resnet34 batch-resnet50)
models=(resnet18 resnet18 resnet34 resnet50)
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | head -1; }

conf() { # lever: off, idle, nice, idle-hold0 (idle with cpu_hold_ms = 0), chrt, cgroup
    local cpu=${1%-hold0}
    case $1 in chrt | cgroup) cpu=off ;; esac
    {
        echo "[policy]"
        echo "cpu = $cpu"
        echo "cpu_nice = 19"
        [ "$1" = idle-hold0 ] && echo "cpu_hold_ms = 0"
        echo "[rule detector]"
        echo "match_app = detector"
        echo "class = latency"
        echo "slo_ms = $SLO"
        echo "[rule batch-models]"
        echo "match_app = batch-*"
        echo "class = batch"
    } >"$T/posd.conf"
}

declare -A ALONE
for i in 1 2 3; do
    j=$($APP --model "${models[i]}" --batch "$BATCH" --requests 100000000 --duration 1.5)
    ALONE[$i]=$(field "$j" throughput_rps)
done

# one run: prints "slo p99 speedup runq_us runq_ms_per_s"
run() { # policy lever
    conf "$2"
    posd_up "$1"
    local pids=() i pre=()
    [ "$2" = chrt ] && pre=(chrt -i 0)
    for i in 1 2 3; do
        POS_APP=${names[i]} LD_PRELOAD=$SHIM "${pre[@]}" $APP --model "${models[i]}" \
            --batch "$BATCH" --requests 100000000 --duration 600 >"$T/m$i.json" &
        pids+=($!)
        [ "$2" = cgroup ] && echo $! >"$CG/cgroup.procs"
    done
    sleep 0.3
    POS_APP=detector LD_PRELOAD=$SHIM $APP --model resnet18 --requests "$REQ" \
        --arrival "poisson:$RATE" --slo "$SLO" >"$T/m0.json" &
    local det=$!
    sleep 1
    # the detector's telemetry over 1 s intervals while it runs (its first second left out:
    # posd's telemetry window may not have closed on it yet)
    build/posstat -a -o json 1 "$(( REQ / RATE - 2 ))" >"$T/stat.json" 2>/dev/null || true
    wait "$det" || true
    kill -INT "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    posd_down
    local d slo p99 sp rq rqs
    d=$(cat "$T/m0.json")
    slo=$(field "$d" slo_attainment) p99=$(field "$d" p99_ms)
    sp=$(awk -v a="$(field "$(cat "$T/m1.json")" throughput_rps)" \
        -v b="$(field "$(cat "$T/m2.json")" throughput_rps)" \
        -v c="$(field "$(cat "$T/m3.json")" throughput_rps)" \
        -v x="${ALONE[1]}" -v y="${ALONE[2]}" -v z="${ALONE[3]}" \
        'BEGIN { printf "%.3f", a / x + b / y + c / z }')
    # the detector's rows (app "detector") of each interval: their means (a row before posd's
    # telemetry read the client at all, with no off-CPU time either, left out)
    read -r rq rqs < <(grep '"report":"interval"' "$T/stat.json" | grep -o '{"id":[^}]*}' |
        grep '"app":"detector"' | grep -v '"offcpu_ms_per_s":0.000' | awk '
        { u = $0; sub(/.*"runq_us":/, "", u); sub(/[,}].*/, "", u)
          m = $0; sub(/.*"runq_ms_per_s":/, "", m); sub(/[,}].*/, "", m)
          if (u != "null" && u != "") { su += u; sm += m; n++ } }
        END { if (n) printf "%.1f %.1f\n", su / n, sm / n; else print "- -" }')
    echo "$slo $p99 $sp $rq $rqs $(cut -d' ' -f1 /proc/loadavg)"
}

declare -A V # V[policy,lever,metric]: the rounds' values, space-separated
levers=(off idle nice idle-hold0 chrt)
if [ "$(id -u)" = 0 ] && [ -f /sys/fs/cgroup/cpu/cpu.shares ] && mkdir "$CG" 2>/dev/null; then
    echo 2 >"$CG/cpu.shares"
    levers+=(cgroup)
fi
nl=${#levers[@]}
LOG=$T/runs.txt LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
    for policy in $POLICIES; do
        for k in $(seq 0 $((nl - 1))); do
            lever=${levers[(k + r) % nl]}
            read -r slo p99 sp rq rqs load < <(run "$policy" "$lever")
            echo "bench-cpu: round $r $policy cpu=$lever: slo $slo p99 $p99 ms speedup $sp" \
                "runq $rq us ($rqs ms/s), load $load" | tee -a "$LOG" >&2
            V[$policy,$lever,slo]+="$slo " V[$policy,$lever,p99]+="$p99 "
            V[$policy,$lever,sp]+="$sp " V[$policy,$lever,rq]+="$rq " V[$policy,$lever,rqs]+="$rqs "
        done
    done
done

# The same mix in possim (virtual time, the same core and policies; its host model on 2 cores,
# the batch clients' threads reweighted as the core's cpu_low says): deterministic, seed 1.
sim_scenario() { # policy lever
    local cpu=${2%-hold0}
    printf '[device]\npreset = h200\nmode = mps\n[sched]\npolicy = %s\ncpu = %s\n' "$1" "$cpu"
    [ "$2" = idle-hold0 ] && printf 'cpu_hold_ms = 0\n'
    printf '[host]\ncores = 2\n'
    printf '[client detector]\nmodel = resnet18\nrequests = %s\narrival = poisson:%s\n' "$REQ" "$RATE"
    printf 'class_priority = 10\nslo_ms = %s\n' "$SLO"
    for i in 1 2 3; do
        printf '[client %s]\nmodel = %s\nbatch = %s\nrequests = 100000000\n' "${names[i]}" \
            "${models[i]}" "$BATCH"
        printf 'class_priority = 20\nstop_with = detector\n'
    done
}
sim_alone() { # index: its req/s alone in possim
    printf '[device]\npreset = h200\nmode = mps\n[sched]\npolicy = fifo\n[host]\ncores = 2\n'
    printf '[client %s]\nmodel = %s\nbatch = %s\nrequests = 300\n' "${names[$1]}" "${models[$1]}" \
        "$BATCH"
}
declare -A SIM_ALONE
for i in 1 2 3; do
    sim_alone "$i" >"$T/alone.ini"
    SIM_ALONE[$i]=$(build/possim "$T/alone.ini" | awk -v n="${names[i]}" '$1 == n { print $11 }')
done
SIMROWS=
for policy in $POLICIES; do
    for lever in off idle nice idle-hold0; do
        sim_scenario "$policy" "$lever" >"$T/sim.ini"
        SIMROWS+=$(build/possim "$T/sim.ini" | awk -v p="$policy" -v l="$lever" \
            -v x="${SIM_ALONE[1]}" -v y="${SIM_ALONE[2]}" -v z="${SIM_ALONE[3]}" '
            $1 == "detector" { slo = $14; p99 = $9 }
            $1 == "batch-resnet18" { a = $11 } $1 == "batch-resnet34" { b = $11 }
            $1 == "batch-resnet50" { c = $11 }
            END { printf "| %s | %s | %.3f | %.2f | %.2f |\n", p, l, slo, p99, a / x + b / y + c / z }')
        SIMROWS+=$'\n'
    done
done

# "median (min..max)" of a list
med() {
    tr ' ' '\n' <<<"$1" | grep -v '^$' | grep -v '^-$' | sort -g | awk -v d="${2:-3}" '
        { v[n++] = $1 }
        END { if (!n) { print "-"; exit }
              m = n % 2 ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2
              printf "%.*f (%.*f..%.*f)", d, m, d, v[0], d, v[n - 1] }'
}

{
    echo "# The CPU lever on make demo's mix (simulated GPU)"
    echo
    echo "\`make bench-cpu\` (bench/cpu.sh), $(date -u +%Y-%m-%d), $(nproc) CPUs"
    echo "($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r), run as"
    echo "$( [ "$(id -u)" = 0 ] && echo root || echo "uid $(id -u) (no telemetry)")."
    echo "Simulated H200 with MPS (sim/, docs/sim.md): every figure is simulated. The detector"
    echo "(resnet18, Poisson $RATE req/s, SLO $SLO ms, $REQ requests) beside the resnet18+34+50"
    echo "batch mix (batch $BATCH, closed loops), four real processes under posd, the batch models"
    echo "in class batch. \`cpu = off\`: the lever off; \`idle\`: SCHED_IDLE; \`nice\`: cpu_nice 19;"
    echo "both with cpu_hold_ms at its default (1000); \`idle-hold0\`: SCHED_IDLE with cpu_hold_ms = 0"
    echo "(lowered only while a detector request is under way). Two references that posd does not"
    echo "apply (posd's lever off): \`chrt\`, the batch processes started under \`chrt -i 0\`;"
    echo "\`cgroup\`, the batch processes moved at their start into one cgroup v1 cpu group of"
    echo "cpu.shares 2 (root, where the machine has cgroup v1). $ROUNDS rounds, the levers' order"
    echo "rotated each round. Load average (1, 5, 15 min) $LOAD0 before, $(cut -d' ' -f1-3 /proc/loadavg) after."
    echo "Each cell: the median of the rounds (min..max). Speedup: the sum of each batch model's"
    echo "req/s over its req/s alone. runq: the detector's launching threads' mean wake-up to"
    echo "running wait (us) and time waiting per second (ms/s), posd's eBPF telemetry through"
    echo "\`posstat -o json 1\`."
    echo
    echo "| policy | cpu | SLO attainment | p99 ms | batch speedup | runq us | runq ms/s |"
    echo "|---|---|---|---|---|---|---|"
    for policy in $POLICIES; do
        for lever in "${levers[@]}"; do
            echo "| $policy | $lever | $(med "${V[$policy,$lever,slo]}") |" \
                "$(med "${V[$policy,$lever,p99]}" 2) | $(med "${V[$policy,$lever,sp]}" 2) |" \
                "$(med "${V[$policy,$lever,rq]}" 1) | $(med "${V[$policy,$lever,rqs]}" 1) |"
        done
    done
    echo
    echo "The same mix in possim (\`build/possim\`, virtual time: the same core and policies, its"
    echo "host model on 2 cores, the batch clients' thread and collector reweighted while the core"
    echo "lowers them; deterministic, seed 1; speedup against each batch model alone in possim):"
    echo
    echo "| policy | cpu | SLO attainment | p99 ms | batch speedup |"
    echo "|---|---|---|---|---|"
    printf '%s' "$SIMROWS"
    echo
    echo "Every run, in the order they ran (load: the 1-minute load average at its end):"
    echo
    echo '```'
    sed 's/^bench-cpu: //' "$LOG"
    echo '```'
} >"$OUT.new"
mv "$OUT.new" "$OUT"
echo "bench-cpu: wrote $OUT" >&2
