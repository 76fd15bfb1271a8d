#!/usr/bin/env bash
# make demo: three inference processes (the POS paper's heterogeneous mix R18 + Iv1 + Mv1) share
# one GPU. Until posd lands this shows the problem pos solves: each model alone, then all three
# at once, time-sliced and under MPS, on the simulated Jetson Xavier NX. Simulated results.
set -euo pipefail
cd "$(dirname "$0")/.."
APP=build/posapp
MODELS=(resnet18 inception_v1 mobilenet_v1)
REQ=${DEMO_REQUESTS:-40}
SLO=${DEMO_SLO_MS:-10}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "demo: a real GPU is present ($(nvidia-smi -L | head -1)); posapp's workloads are"
    echo "demo: simulated kernels, so this demo runs on the simulated GPU all the same."
fi
export LD_LIBRARY_PATH=$PWD/build/sim POS_SIM_DEVICE=${POS_SIM_DEVICE:-xavier-nx}
export POS_SIM_INSTANCE=demo-$$

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
row() { printf '  %-14s %9s %9s %9s %10s\n' "$@"; }

run_set() { # MODE label: runs the three models at once, prints a row each
    local mode=$1 pids=() files=() i
    for i in 0 1 2; do
        files[i]=$(mktemp)
        POS_SIM_MODE=$mode "$APP" --model "${MODELS[i]}" --requests "$REQ" --slo "$SLO" >"${files[i]}" &
        pids[i]=$!
    done
    for i in 0 1 2; do
        wait "${pids[i]}"
        local j; j=$(cat "${files[i]}")
        row "${MODELS[i]}" "$(field "$j" p50_ms)" "$(field "$j" p99_ms)" \
            "$(field "$j" throughput_rps)" "$(field "$j" slo_attainment)"
        rm -f "${files[i]}"
    done
}

echo "pos demo (simulated $POS_SIM_DEVICE; $REQ closed-loop requests per model, SLO $SLO ms)"
echo
echo "each model alone:"
row model p50_ms p99_ms req/s slo_ok
for m in "${MODELS[@]}"; do
    j=$(POS_SIM_MODE=timeslice "$APP" --model "$m" --requests "$REQ" --slo "$SLO")
    row "$m" "$(field "$j" p50_ms)" "$(field "$j" p99_ms)" "$(field "$j" throughput_rps)" \
        "$(field "$j" slo_attainment)"
done
echo
echo "all three at once, time-sliced (a GPU without MPS):"
row model p50_ms p99_ms req/s slo_ok
run_set timeslice
echo
echo "all three at once, MPS (kernels of different processes share the SMs):"
row model p50_ms p99_ms req/s slo_ok
run_set mps
echo
echo "Without a scheduler every model slows down together; posd (next) reorders and co-locates"
echo "their kernels by priority and SLO. Figures: simulated GPU, see docs/sim.md."
