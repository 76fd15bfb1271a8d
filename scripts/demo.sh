#!/usr/bin/env bash
# make demo: three inference processes share one GPU — a latency-critical detector (resnet18,
# SLO 10 ms) and two batch models (inception_v1, mobilenet_v1), closed loop, the POS paper's
# heterogeneous mix. Each alone; then all three without a scheduler (time-sliced); then under
# posd with fifo (accounting only), the priority policy and pos, the batch models matched to
# the batch class by a rule. Unmodified processes: LD_PRELOAD of the shim is all they get.
# Simulated Jetson Xavier NX unless POS_SIM_DEVICE says otherwise; results are simulated.
set -euo pipefail
cd "$(dirname "$0")/.."
APP=build/posapp SHIM=$PWD/build/libposshim.so
REQ=${DEMO_REQUESTS:-60}
SLO=${DEMO_SLO_MS:-10}
T=$(mktemp -d)
# the virtual GPU's segment too: the demo's background models are killed, so the last process
# that had it may not have removed it
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"; rm -f "/dev/shm/pos-sim.$(id -u).demo-$$"' EXIT

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "demo: a real GPU is present ($(nvidia-smi -L | head -1)); posapp's workloads are"
    echo "demo: simulated kernels, so this demo runs on the simulated GPU all the same."
    echo "demo: (bash tests/gpu/run.sh checks the shim on the real GPU.)"
fi
export LD_LIBRARY_PATH=$PWD/build/sim POS_SIM_DEVICE=${POS_SIM_DEVICE:-xavier-nx}
export POS_SIM_INSTANCE=demo-$$ POS_SIM_MODE=timeslice POS_SOCKET=$T/posd.sock
export POSD_STATE_DIR=$T/state # posd's kernel profiles stay in the demo's own directory
cat >"$T/posd.conf" <<'EOF'
[rule detector]
match_app = detector
class = latency
slo_ms = 10

[rule batch-models]
match_app = batch-*
class = batch
EOF

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
row() { printf '  %-22s %9s %9s %9s %8s\n' "$@"; }
header() { row model p50_ms p99_ms req/s slo_ok; }
names=(detector batch-inception batch-mobilenet)
models=(resnet18 inception_v1 mobilenet_v1)

show() { # name json
    row "$1" "$(printf '%.2f' "$(field "$2" p50_ms)")" "$(printf '%.2f' "$(field "$2" p99_ms)")" \
        "$(printf '%.1f' "$(field "$2" throughput_rps)")" "$(field "$2" slo_attainment)"
}

# run_mix PRELOAD: the detector for REQ requests, the batch models closed loop meanwhile
run_mix() {
    local preload=$1 pids=() i
    for i in 1 2; do
        POS_APP=${names[i]} LD_PRELOAD=$preload $APP --model "${models[i]}" --requests 100000 \
            --slo "$SLO" >"$T/m$i.json" &
        pids+=($!)
    done
    sleep 0.3
    POS_APP=detector LD_PRELOAD=$preload $APP --model resnet18 --requests "$REQ" --slo "$SLO" \
        >"$T/m0.json"
    local stat=""
    [ -n "$preload" ] && stat=$(build/posstat 2>/dev/null | grep -E 'batch-' || true)
    kill -INT "${pids[@]}" 2>/dev/null || true
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    show detector "$(cat "$T/m0.json")"
    [ -n "$stat" ] && echo "$stat" | awk '{printf "  %-22s %8s launches/s%s\n", $3, $5, $NF == "yes" ? "  (held)" : ""}'
    return 0
}

echo "pos demo: a detector (resnet18, SLO $SLO ms) and two batch models on one simulated"
echo "$POS_SIM_DEVICE; $REQ detector requests per run, closed loop."
echo
echo "each model alone:"
header
for i in 0 1 2; do
    show "${names[i]}" "$($APP --model "${models[i]}" --requests "$REQ" --slo "$SLO")"
done
echo
echo "all three at once, no scheduler (time-sliced GPU):"
header
run_mix ""
echo
for policy in fifo priority pos; do
    build/posd -f -c "$T/posd.conf" -p $policy 2>>"$T/posd.log" &
    posd_pid=$!
    for _ in $(seq 100); do [ -S "$POS_SOCKET" ] && break; sleep 0.02; done
    echo "all three under posd, policy $policy (batch models: launches/s from posstat):"
    header
    run_mix "$SHIM"
    kill $posd_pid
    wait $posd_pid 2>/dev/null || true
    echo
done
echo "Under priority, posd holds the batch models while the detector has work and lets them"
echo "use the gaps; pos does the same on this time-sliced GPU and, under MPS, runs them beside"
echo "the detector where their kernels fit (docs/policy.md, docs/results/pos.md). Figures:"
echo "simulated GPU."
