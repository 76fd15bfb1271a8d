#!/usr/bin/env bash
# Policy learned against the hand-written policies (issue 22, docs/learned.md), simulated:
# `possim train` on the training mixes of bench/learned_mixes.py (named there before any
# training), then every policy on the held-out mixes (a device, models, loads and an arrival
# process never seen in training), the decision time at 8 clients, and the static mixes
# against possim search's sequential, greedy and DP schedules. Writes docs/results/learned.md,
# learned-curve.csv and learned-curve.svg.
#   SEEDS="1 2"   training seeds     EPOCHS=15   epochs each     EVAL_SEEDS="1 2 ... 7"
#   REUSE=DIR     take the weights, curves and logs of an earlier run's DIR (its T) instead of
#                 training again (the same SEEDS and EPOCHS): the evaluation only
set -euo pipefail
cd "$(dirname "$0")/.."
export POS_MODELS_DIR=${POS_MODELS_DIR:-$PWD/sim/models}
POSSIM=${POSSIM:-$PWD/build/possim}
PY=/usr/bin/python3
SEEDS=${SEEDS:-1 2}
EPOCHS=${EPOCHS:-15}
EVAL_SEEDS=${EVAL_SEEDS:-1 2 3 4 5 6 7}
REUSE=${REUSE:-}
T=${T:-$PWD/build/bench-learned}
OUT=${OUT:-docs/results}
rm -rf "$T"
mkdir -p "$T" "$OUT"
start=$(date +%s)

POSSIM=$POSSIM $PY bench/learned_mixes.py "$T"
sed -i "s/^\[train\]$/[train]\nepochs = $EPOCHS\neval_seeds = 2/" "$T/train.curriculum"

# ---- training ---------------------------------------------------------------------------
declare -A TRAIN_S
for s in $SEEDS; do
    if [ -n "$REUSE" ]; then
        cp "$REUSE/s$s.weights" "$REUSE/s$s.csv" "$REUSE/train$s.log" "$REUSE/train$s.time" "$T/"
        TRAIN_S[$s]=$(awk '{printf "%.0f", $1 + $2}' "$T/train$s.time")
        continue
    fi
    /usr/bin/time -f "%U %S" -o "$T/train$s.time" \
        "$POSSIM" train -o "$T/s$s.weights" --seed "$s" --curve "$T/s$s.csv" \
        --checkpoints "$T/ckpt$s" "$T/train.curriculum" 2>"$T/train$s.log"
    TRAIN_S[$s]=$(awk '{printf "%.0f", $1 + $2}' "$T/train$s.time")
done

# ---- held-out dynamic mixes ---------------------------------------------------------------
# one run: "slo_attainment p99_ms batch_rps" of the latency client and the others
run() { # FILE POLICY WEIGHTS SEED
    local f=$T/run.ini
    sed "s/^policy = .*/policy = $2/" "$1" >"$f"
    [ -n "$3" ] && sed -i "s|^policy = .*|&\nweights = $3|" "$f"
    "$POSSIM" -o json --seed "$4" "$f" | $PY -c '
import json, sys
d = json.load(sys.stdin)
lat = [c for c in d["clients"] if c["name"] == "latency"][0]
b = sum(c["throughput_rps"] for c in d["clients"] if c["name"] != "latency")
print("%.5f %.4f %.3f %.4f %.5f" % (lat["slo_attainment"], lat["p99_ms"], b, d["decision_us"], d["makespan_s"]))'
}
POLICIES="fifo priority pos"
for s in $SEEDS; do POLICIES="$POLICIES learned$s"; done
res=$T/heldout.txt
: >"$res"
while IFS=$'\t' read -r fam name file; do
    for p in $POLICIES; do
        pol=$p w=
        case $p in learned*) pol=learned w=$T/s${p#learned}.weights ;; esac
        for k in $EVAL_SEEDS; do
            echo "$fam|$name|$p|$k|$(run "$file" "$pol" "$w" "$k")" >>"$res"
        done
    done
done <"$T/test.list"

# ---- decision time at 8 clients -------------------------------------------------------------
dec=$T/decide8.ini
{
    printf '[device]\npreset = h200\nmode = mps\n[sched]\npolicy = pos\n'
    printf '[client latency]\nmodel = resnet34\nrequests = 300\narrival = poisson:300\nclass_priority = 10\nslo_ms = 10\n'
    i=0
    for m in yolop inception_v1 mobilenet_v3 resnet34 yolop inception_v1 mobilenet_v3; do
        printf '[client b%d]\nmodel = %s\nrequests = 100000\nclass_priority = %d\nstop_with = latency\n' \
            $i $m $((20 + i % 3))
        i=$((i + 1))
    done
} >"$dec"
DECIDE=
for p in pos learned; do
    w=
    [ $p = learned ] && w=$T/s${SEEDS%% *}.weights
    vals=
    for k in 1 2 3; do vals="$vals $(run "$dec" $p "$w" $k | awk '{print $4}')"; done
    DECIDE="$DECIDE $p:$(tr ' ' '\n' <<<"$vals" | grep . | sort -g | sed -n 2p)"
done

# ---- static mixes ---------------------------------------------------------------------------
static=$T/static.txt
: >"$static"
REQ=60
for mix in "resnet34 inception_v1 mobilenet_v3" "yolop resnet34 mobilenet_v3"; do
    id=${mix// /+}
    f=$T/static-${mix// /_}.ini
    { printf '[device]\npreset = h200\nmode = mps\n[sched]\npolicy = fifo\n'
      for m in $mix; do printf '[client %s]\nmodel = %s\nrequests = %d\n' "$m" "$m" $REQ; done; } >"$f"
    "$POSSIM" search --units 16 --max-run 8 -w "$T/$id.dp.sched" "$f" >"$T/$id.search"
    row() { awk -v m="$1" -v n="$2" '$1 == m {print $n}' "$T/$id.search"; }
    line="$id|$(row sequential 3)|$(row greedy 3)|$(row dp 3)|$(row greedy 10)|$(row dp 10)"
    for p in fifo pos learned staged; do
        g=$T/static.run.ini
        sed "s/^policy = .*/policy = ${p}/" "$f" >"$g"
        [ $p = learned ] && sed -i "s|^policy = .*|&\nweights = $T/s${SEEDS%% *}.weights|" "$g"
        [ $p = staged ] && sed -i "s|^policy = .*|&\nschedule = $T/$id.dp.sched|" "$g"
        out=$("$POSSIM" -o json "$g")
        if [ $p = staged ]; then
            # in lock step a closed-loop client's request spans one round: the longest median
            v=$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print("%.1f" % max(c["p50_ms"]*1000 for c in d["clients"]))' "$out")
        else
            v=$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print("%.1f" % (d["makespan_s"]/'$REQ'*1e6))' "$out")
        fi
        line="$line|$v"
    done
    echo "$line" >>"$static"
done

# ---- end to end: the best and worst held-out rows (learned's SLO attainment against pos's,
# seed-1 weights), as real processes: posd + libposshim.so + posapp on the simulated driver
# (churn rows are not run end to end: their clients' starts would need a scheduler of their
# own here)
E2E_REPS=${E2E_REPS:-3}
APP=$PWD/build/posapp SHIM=$PWD/build/libposshim.so POSD=$PWD/build/posd
export LD_LIBRARY_PATH=$PWD/build/sim POS_SOCKET=$T/posd.sock
# shellcheck source=bench/lib.sh
. bench/lib.sh
trap 'posd_down; jobs -p | xargs -r kill 2>/dev/null; wait 2>/dev/null || true' EXIT
e2e=$T/e2e.txt
: >"$e2e"
read -r best worst < <($PY - "$res" "learned${SEEDS%% *}" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    fam, name, pol, seed, vals = line.rstrip("\n").split("|")
    if fam.startswith("churn"):
        continue
    rows.setdefault(name, {}).setdefault(pol, []).append(float(vals.split()[0]))
d = {n: statistics.median(by[sys.argv[2]]) - statistics.median(by["pos"]) for n, by in rows.items()}
order = sorted(d, key=lambda n: d[n])
print(order[-1], order[0])
PYEOF
)
for name in $best $worst; do
    f=$T/test/$name.ini
    read -r lmodel arrival slo nreq bmodels < <($PY - "$f" <<'PYEOF'
import sys
cl, cur = {}, None
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("[client "):
        cur = line[8:-1]; cl[cur] = {}
    elif cur and "=" in line:
        k, v = (x.strip() for x in line.split("=", 1)); cl[cur][k] = v
lat = cl.pop("latency")
print(lat["model"], lat["arrival"], lat["slo_ms"], lat["requests"], ",".join(c["model"] for c in cl.values()))
PYEOF
)
    for p in pos learned; do
        for ((r = 0; r < E2E_REPS; r++)); do
            export POS_SIM_DEVICE=h200 POS_SIM_MODE=mps POS_SIM_INSTANCE=bench-learned-$r-$$
            { printf '[rule lat]\nmatch_app = latency\nslo_ms = %s\n' "$slo"
              printf '[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n'
              printf '[policy]\nweights = %s\n' "$T/s${SEEDS%% *}.weights"; } >"$T/posd.conf"
            posd_up "$p"
            pids=()
            i=0
            for b in ${bmodels//,/ }; do
                env POS_APP=batch$i LD_PRELOAD=$SHIM "$APP" --model "$b" --requests 100000000 \
                    --duration 120 >"$T/e2e-b$i.json" &
                pids+=($!)
                i=$((i + 1))
            done
            sleep 0.3
            lj=$(env POS_APP=latency LD_PRELOAD=$SHIM "$APP" --model "$lmodel" --requests "$nreq" \
                --arrival "$arrival" --slo "$slo" --seed 1)
            for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
            for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
            posd_down
            rm -f "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"
            brps=$(cat "$T"/e2e-b*.json | $PY -c '
import json, sys
print("%.1f" % sum(d["requests"] / d["makespan_s"] for d in map(json.loads, sys.stdin) if d.get("makespan_s")))')
            echo "$name|$p|$r|$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print("%s %s" % (d["slo_attainment"], d["p99_ms"]))' "$lj") $brps" >>"$e2e"
        done
    done
done

# ---- the report -----------------------------------------------------------------------------
cp "$T/s${SEEDS%% *}.csv" "$OUT/learned-curve.csv"
$PY bench/learned_report.py "$T" "$OUT" "$SEEDS" "$EPOCHS" "$EVAL_SEEDS" "$DECIDE" \
    "$(for s in $SEEDS; do printf '%s:%s ' "$s" "${TRAIN_S[$s]}"; done)" "$(($(date +%s) - start))" \
    "$REUSE" "${REUSE_WHAT:-an earlier run of this script}"
echo "wrote $OUT/learned.md"
