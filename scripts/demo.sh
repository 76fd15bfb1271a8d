#!/usr/bin/env bash
# make demo: a latency-critical detector (resnet18, Poisson arrivals, an SLO) shares one GPU
# with the POS paper's resnet18+resnet34+resnet50 mix (batch 16, closed loops), as four
# unmodified processes: LD_PRELOAD of the shim is all they get. Each model alone; then all four
# without a scheduler; then under posd with fifo (accounting only), priority and pos (the
# shipped default), the batch models matched to the batch class by a rule; posstat live during
# the pos run. Then the same scenario in possim (virtual time, the same scheduling code), and a
# side-by-side table. Simulated H200 with MPS unless DEMO_DEVICE / DEMO_MODE say otherwise;
# every figure is simulated. No root: the socket, state and scratch files live in a temporary
# directory, removed at exit with the virtual GPU's segment. posd runs with the CPU lever at
# nice (DEMO_CPU=off|idle|nice, [policy] cpu; possim models it too): on this 2-core machine it
# raised the detector's SLO attainment by about 0.1 under priority and pos (median of 3 rounds,
# docs/results/cpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
APP=build/posapp SHIM=$PWD/build/libposshim.so
DEV=${DEMO_DEVICE:-h200} MODE=${DEMO_MODE:-mps}
REQ=${DEMO_REQUESTS:-600} RATE=${DEMO_RATE:-300} SLO=${DEMO_SLO_MS:-3} BATCH=${DEMO_BATCH:-16}
ALONE_S=${DEMO_ALONE_S:-1.5}
for f in $APP "$SHIM" build/posd build/posstat build/possim build/sim/libcuda.so.1; do
    [ -e "$f" ] || { echo "demo: $f is missing: run make first" >&2; exit 1; }
done
T=$(mktemp -d)
# the virtual GPU's segment too: the demo's background models are killed, so the last process
# that had it may not have removed it
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"; rm -f "/dev/shm/pos-sim.$(id -u).demo-$$"' EXIT

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "demo: a real GPU is present ($(nvidia-smi -L | head -1)); this demo runs on the"
    echo "demo: simulated GPU all the same; pos on the real one: bash tests/gpu/run.sh (docs/gpu.md)."
fi
# DEMO_SIM_DIR: another build's simulated driver (bench/simlock.sh compares two side by side)
export LD_LIBRARY_PATH=${DEMO_SIM_DIR:-$PWD/build/sim} POS_SIM_DEVICE=$DEV POS_SIM_MODE=$MODE
export POS_SIM_INSTANCE=demo-$$ POS_SOCKET=$T/posd.sock
export POSD_STATE_DIR=$T/state # posd's kernel profiles stay in the demo's own directory
cat >"$T/posd.conf" <<EOF
[policy]
cpu = ${DEMO_CPU:-nice}

[rule detector]
match_app = detector
class = latency
slo_ms = $SLO

[rule batch-models]
match_app = batch-*
class = batch
EOF

names=(detector batch-resnet18 batch-resnet34 batch-resnet50)
models=(resnet18 resnet18 resnet34 resnet50)
batches=(1 "$BATCH" "$BATCH" "$BATCH")
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
num() { printf "%.${2:-2}f" "$1"; }
row() { printf '  %-9s %-15s %8s %8s %7s %8s %8s\n' "$@"; }
header() { row policy model p50_ms p99_ms slo_ok req/s x_alone; }
declare -A R # R[run,model,key]: p50 p99 slo rps

# one posapp's JSON into R
keep() { # run index json
    R[$1,$2,p50]=$(field "$3" p50_ms) R[$1,$2,p99]=$(field "$3" p99_ms)
    R[$1,$2,slo]=$(field "$3" slo_attainment) R[$1,$2,rps]=$(field "$3" throughput_rps)
}
# one possim text line (client model batch prio requests launches p50 p90 p99 mean req_s ...)
keep_sim() { # run index line
    set -- "$1" "$2" $3
    R[$1,$2,p50]=$9 R[$1,$2,p99]=${11} R[$1,$2,rps]=${13} R[$1,$2,slo]=${16}
    [ "${R[$1,$2,slo]}" = - ] && R[$1,$2,slo]=null
    return 0
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
# the batch models' work against each alone: sum of req/s over req/s alone (1 = as much as
# running them one after another; more = co-running did more)
speedup() { # run alone-run
    awk -v a="${R[$1,1,rps]}" -v b="${R[$1,2,rps]}" -v c="${R[$1,3,rps]}" \
        -v x="${R[$2,1,rps]}" -v y="${R[$2,2,rps]}" -v z="${R[$2,3,rps]}" \
        'BEGIN { printf "%.2f", a / x + b / y + c / z }'
}
show_run() { # run alone-run label
    local i slo
    for i in 0 1 2 3; do
        slo=${R[$1,$i,slo]}
        [ "$slo" = null ] && slo=- || slo=$(num "$slo" 3)
        row "$([ "$i" = 0 ] && echo "$3")" "${names[i]}" "$(num "${R[$1,$i,p50]}")" \
            "$(num "${R[$1,$i,p99]}")" "$slo" "$(num "${R[$1,$i,rps]}" 1)" \
            "$(ratio "${R[$1,$i,rps]}" "${R[$2,$i,rps]}")"
    done
    printf '  %-25s batch speedup (sum of x_alone of the three): %s\n' "" "$(speedup "$1" "$2")"
}

detector() { # preload
    POS_APP=detector LD_PRELOAD=$1 $APP --model resnet18 --requests "$REQ" \
        --arrival "poisson:$RATE" --slo "$SLO"
}
# run_mix RUN PRELOAD [posstat]: the detector for REQ requests, the batch models closed loop
# meanwhile, stopped when it is done
run_mix() {
    local run=$1 preload=$2 pids=() i
    # DEMO_SIM_STATS=DIR: each process's device-lock figures (docs/sim.md, POS_SIM_STATS)
    [ -z "${DEMO_SIM_STATS:-}" ] || export POS_SIM_STATS=$DEMO_SIM_STATS/$run-%p.json
    for i in 1 2 3; do
        POS_APP=${names[i]} LD_PRELOAD=$preload $APP --model "${models[i]}" --batch "$BATCH" \
            --requests 100000000 --duration 600 >"$T/m$i.json" &
        pids+=($!)
    done
    sleep 0.3
    if [ -n "${3:-}" ]; then # posstat live beside the run: two 1 s intervals and their average
        build/posstat -a 1 2 | sed 's/^/  | /' &
        pids+=($!)
    fi
    detector "$preload" >"$T/m0.json"
    kill -INT "${pids[@]:0:3}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    for i in 0 1 2 3; do keep "$run" $i "$(cat "$T/m$i.json")"; done
    if [ -n "${DEMO_SIM_STATS:-}" ]; then
        for i in 0 1 2 3; do cp "$T/m$i.json" "$DEMO_SIM_STATS/$run-result-${names[i]}.json"; done
        unset POS_SIM_STATS
    fi
}

echo "pos demo: a detector (resnet18, SLO $SLO ms, Poisson $RATE requests/s) beside POS's"
echo "resnet18+resnet34+resnet50 mix (batch $BATCH, closed loops) on one simulated $DEV ($MODE),"
echo "four unmodified processes. Every figure is simulated (docs/sim.md)."
echo
echo "each model alone (real processes; the batch models for $ALONE_S s each):"
keep alone 0 "$(detector "")"
for i in 1 2 3; do
    keep alone $i "$($APP --model "${models[i]}" --batch "$BATCH" --requests 100000000 \
        --duration "$ALONE_S")"
done
header
show_run alone alone alone
echo
echo "all four at once, no scheduler:"
run_mix none ""
header
show_run none alone none
for policy in fifo priority pos; do
    # pos is posd's default: that run names no policy
    build/posd -f -c "$T/posd.conf" $([ $policy = pos ] || echo "-p $policy") 2>>"$T/posd.log" &
    posd_pid=$!
    for _ in $(seq 200); do [ -S "$POS_SOCKET" ] && break; sleep 0.02; done
    echo
    if [ $policy = pos ]; then
        echo "all four under posd, its default policy pos (posstat -a 1 2 live meanwhile):"
        run_mix $policy "$SHIM" posstat
    else
        echo "all four under posd, policy $policy:"
        run_mix $policy "$SHIM"
    fi
    kill $posd_pid
    wait $posd_pid 2>/dev/null || true
    header
    show_run $policy alone $policy
done

# The same scenario in possim: virtual time, the scheduling core and policies posd runs, the
# simulated driver's device model; its host model (no [host] section: this machine's cores).
scenario() { # policy [index: that client alone]
    printf '[device]\npreset = %s\nmode = %s\n[sched]\npolicy = %s\ncpu = %s\n' "$DEV" "$MODE" "$1" "${DEMO_CPU:-nice}"
    local i
    for i in 0 1 2 3; do
        [ -n "${2:-}" ] && [ "$2" != $i ] && continue
        printf '[client %s]\nmodel = %s\nbatch = %s\n' "${names[i]}" "${models[i]}" "${batches[i]}"
        if [ $i = 0 ]; then
            printf 'requests = %s\narrival = poisson:%s\nclass_priority = 10\nslo_ms = %s\n' \
                "$REQ" "$RATE" "$SLO"
        elif [ -n "${2:-}" ]; then
            printf 'requests = 300\nclass_priority = 20\n'
        else
            printf 'requests = 100000000\nclass_priority = 20\nstop_with = detector\n'
        fi
    done
}
possim_run() { # run policy [index]
    scenario "$2" "${3:-}" >"$T/s.ini"
    local line
    while read -r line; do
        set -- "$1" "$2" "${3:-}" $line
        local i
        for i in 0 1 2 3; do [ "${names[i]}" = "$4" ] && keep_sim "$1" $i "$line"; done
    done < <(build/possim "$T/s.ini" | grep -v '^#')
    return 0
}
for i in 0 1 2 3; do possim_run sim-alone fifo $i; done
for policy in none fifo priority pos; do possim_run sim-$policy $policy; done
echo
echo "the same scenario in possim (virtual time, the same scheduling code; the host work on $(nproc) cores):"
header
for policy in none fifo priority pos; do show_run sim-$policy sim-alone $policy; done

echo
echo "side by side (detector: SLO attainment and p99; batch: speedup over running alone one"
echo "after another):"
printf '  %-9s | %-28s | %-28s\n' "" "real processes" "possim"
printf '  %-9s | %8s %9s %9s | %8s %9s %9s\n' policy slo_ok p99_ms speedup slo_ok p99_ms speedup
for policy in none fifo priority pos; do
    printf '  %-9s | %8s %9s %9s | %8s %9s %9s\n' $policy \
        "$(num "${R[$policy,0,slo]}" 3)" "$(num "${R[$policy,0,p99]}")" "$(speedup $policy alone)" \
        "$(num "${R[sim-$policy,0,slo]}" 3)" "$(num "${R[sim-$policy,0,p99]}")" \
        "$(speedup sim-$policy sim-alone)"
done
echo
cat <<EOF
Without a scheduler, or under fifo (which only accounts), the detector's kernels queue behind
the batch models' and it misses its SLO. priority holds the batch models while the detector has
work: the SLO is met and batch work drops. pos runs batch kernels beside the detector's where
they fit in the SMs the detector and the other batch clients leave (MPS), and stops while the
detector's requests end late (its SLO guard). Under both, posd lowers the batch processes'
threads to nice 19 while the detector has a request under way (the CPU lever, [policy] cpu =
${DEMO_CPU:-nice}). possim gives the processes' host work this machine's $(nproc) cores (its host
model) but has no wake-up delays; with real processes, the batch processes, the simulated
driver's threads and posd take CPU time from the detector's at moments possim does not see:
where the two columns part, that is why (docs/results/e2e.md compares them case by case; posd's
kernel profiles come from the device's own times, docs/results/profiles.md). Every figure here is
simulated. More: docs/policy.md (the policies),
docs/results/pos.md (the comparison over devices, loads and seeds), docs/posstat.md.
EOF
