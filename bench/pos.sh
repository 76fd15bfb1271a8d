#!/usr/bin/env bash
# The pos policy against fifo and priority (simulated GPU). Part A runs every scenario in
# possim (virtual time, the very scheduling code posd runs) over several seeds; part B runs the
# isolation rows end to end (posd + libposshim.so + posapp on the simulated driver, real
# processes) and sets them beside possim's. Writes docs/results/pos.md.
#
#   bash bench/pos.sh                 (make bench-pos runs it)
#   SEEDS="1 2 3 4 5" E2E=0 OUT=/tmp/pos.md bash bench/pos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-1 2 3}
E2E=${E2E:-1}
OUT=${OUT:-docs/results/pos.md}
POSSIM=build/possim APP=build/posapp SHIM=build/libposshim.so POSD=build/posd
for f in $POSSIM $APP $SHIM $POSD; do [ -e "$f" ] || { echo "bench: build first (make)" >&2; exit 1; }; done
T=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"; rm -f /dev/shm/pos-sim.$(id -u).bench-pos-*-$$' EXIT
POLICIES="fifo priority pos"

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR%2) print a[(NR+1)/2]; else printf "%.6g\n", (a[NR/2]+a[NR/2+1])/2}'; }
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
minmax() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.2f-%.2f", lo, hi}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b == 0 || a == "-" || b == "-") print "-"; else printf "%.3f", a / b}'; }
# possim text output: FIELD (p99_ms, launch_s, req_s, slo_ok) of client NAME; summary values
col() { awk -v n="$2" -v f="$3" '/^# client/ {for (i = 2; i <= NF; i++) h[$i] = i - 1} $1 == n {print $(h[f]); exit}' "$1"; }
sumcol() { awk -v p="$2" -v f="$3" '/^# client/ {for (i = 2; i <= NF; i++) h[$i] = i - 1} $1 ~ p {s += $(h[f])} END {print s + 0}' "$1"; }
summary() { awk -v f="$2" '/^# makespan_s/ {for (i = 2; i < NF; i++) if ($i == f) print $(i + 1)}' "$1"; }
sim() { "$POSSIM" --seed "$1" "$2" >"$3"; }

# ---- A0. kernel profile accuracy -------------------------------------------------------------
# a model alone for 50 requests: what the core learnt of each kernel against the device model's
# own duration (possim --profile-check), kernels of 20 us or more
echo "bench-pos: A0 profile accuracy..." >&2
acc() { # kcheck output -> "kernels sampled within10 max_err_pct"
    awk '/^  kcheck/ && $6 >= 20 {n++; if ($9 + 0 > 0) {s++; e = $12 + 0; if (e < 0) e = -e; if (e <= 10) w++; if (e > m) m = e}} END {printf "%d %d %d %.1f", n, s, w, m}' "$1"
}
A0="| preset | model | kernels >= 20 us | sampled | within 10% | largest error % |
|---|---|---|---|---|---|
"
for preset in xavier-nx rtx3080 h200; do
    for m in resnet50 mobilenet_v2 inception_v3 bert_base yolop; do
        printf '[device]\npreset = %s\n[sched]\npolicy = priority\n[client m]\nmodel = %s\nrequests = 50\n' "$preset" "$m" >"$T/acc.ini"
        "$POSSIM" --profile-check "$T/acc.ini" >"$T/acc.out"
        read -r nk ns nw mx <<<"$(acc "$T/acc.out")"
        A0+="| $preset | $m | $nk | $ns | $nw | $mx |
"
    done
done

# ---- A1. isolation with throughput --------------------------------------------------------
# a latency resnet50 (300 requests) beside two batch resnet50 clients in closed loops, killed
# when it finishes
iso_ini() { # preset mode arrival policy with_batch
    cat <<EOF
[device]
preset = $1
mode = $2
[sched]
policy = $4
[client lat]
model = resnet50
requests = 300
arrival = $3
class_priority = 10
EOF
    if [ "$5" = 1 ]; then
        for b in a b; do printf '[client batch-%s]\nmodel = resnet50\nrequests = 1000000\nclass_priority = 20\nstop_with = lat\n' $b; done
    fi
}
batch_alone_ini() { # preset mode
    printf '[device]\npreset = %s\nmode = %s\n[sched]\npolicy = fifo\n' "$1" "$2"
    for b in a b; do printf '[client batch-%s]\nmodel = resnet50\nrequests = 400\nclass_priority = 20\n' $b; done
}
# 50% load of a preset: half the closed-loop request rate of the latency client alone
half_load() { # preset
    iso_ini "$1" mps closed fifo 0 >"$T/hl.ini"
    sim 1 "$T/hl.ini" "$T/hl.out"
    awk -v r="$(col "$T/hl.out" lat req_s)" 'BEGIN {printf "%.0f", r / 2}'
}
ROWS=("xavier-nx timeslice closed" "xavier-nx mps closed" "h200 mps closed" "rtx3080 mps closed"
      "xavier-nx mps poisson:40" "xavier-nx timeslice poisson:40" "h200 mps poisson:70"
      "h200 mps poisson:$(half_load h200)" "rtx3080 mps poisson:$(half_load rtx3080)")
echo "bench-pos: A1 isolation with throughput, ${#ROWS[@]} rows x seeds $SEEDS..." >&2
A1="| preset, mode, latency arrivals | solo p99 ms | policy | latency p99 / solo (median, range) | batch launches/s | batch / fifo | bound launches/s | batch / bound |
|---|---|---|---|---|---|---|---|
"
declare -A POSSIM_ISO
for row in "${ROWS[@]}"; do
    set -- $row
    batch_alone_ini "$1" "$2" >"$T/ba.ini"
    sim 1 "$T/ba.ini" "$T/ba.out"
    alone=$(sumcol "$T/ba.out" '^batch' launch_s)
    iso_ini "$1" "$2" "$3" fifo 0 >"$T/solo.ini"
    declare -A p99r=() bl=() solo=()
    solo_all="" idle_all=""
    for s in $SEEDS; do
        sim "$s" "$T/solo.ini" "$T/solo.out"
        solo[$s]=$(col "$T/solo.out" lat p99_ms)
        solo_all+="${solo[$s]} "
        idle_all+="$(awk -v b="$(summary "$T/solo.out" busy)" 'BEGIN {print 1 - b}') "
        for p in $POLICIES; do
            iso_ini "$1" "$2" "$3" "$p" 1 >"$T/m.ini"
            sim "$s" "$T/m.ini" "$T/m.out"
            p99r[$p]+="$(ratio "$(col "$T/m.out" lat p99_ms)" "${solo[$s]}") "
            bl[$p]+="$(sumcol "$T/m.out" '^batch' launch_s) "
        done
    done
    bound=$(awk -v a="$alone" -v i="$(med "$idle_all")" 'BEGIN {printf "%.0f", a * i}')
    fifo_b=$(med "${bl[fifo]}")
    for p in $POLICIES; do
        b=$(med "${bl[$p]}")
        A1+="| $1 $2 $3 | $(med "$solo_all") | $p | $(med "${p99r[$p]}") ($(minmax "${p99r[$p]}")) | $(printf %.0f "$b") | $(ratio "$b" "$fifo_b") | $bound | $(ratio "$b" "$bound") |
"
        POSSIM_ISO[$row,$p]="$(med "${p99r[$p]}") $(printf %.0f "$b")"
    done
done

# ---- A2. POS's mixes -----------------------------------------------------------------------
mix_ini() { # preset mode policy models...
    local preset=$1 mode=$2 pol=$3
    shift 3
    printf '[device]\npreset = %s\nmode = %s\n[sched]\npolicy = %s\n' "$preset" "$mode" "$pol"
    local i=0
    for m in "$@"; do
        printf '[client m%d-%s]\nmodel = %s\nrequests = 60\nclass_priority = 10\n' $i "$m" "$m"
        i=$((i + 1))
    done
}
MIXES=("resnet18 resnet34 resnet50" "inception_v1 inception_v2 inception_v3"
       "mobilenet_v1 mobilenet_v2 mobilenet_v3" "resnet18 inception_v1 mobilenet_v1"
       "resnet34 inception_v2 mobilenet_v2" "resnet50 inception_v3 mobilenet_v3")
DEVS=("rtx3080 mps" "h200 mps" "xavier-nx timeslice")
echo "bench-pos: A2 POS mixes, ${#MIXES[@]} mixes x ${#DEVS[@]} devices..." >&2
A2="| device | mix | sequential ms/round | fifo speedup | priority speedup | pos speedup | pos / fifo | busy (fifo, pos) |
|---|---|---|---|---|---|---|---|
"
for dev in "${DEVS[@]}"; do
    set -- $dev
    for mix in "${MIXES[@]}"; do
        seq_s=0
        for m in $mix; do
            mix_ini "$1" "$2" fifo "$m" >"$T/one.ini"
            sim 1 "$T/one.ini" "$T/one.out"
            seq_s=$(awk -v a="$seq_s" -v b="$(summary "$T/one.out" makespan_s)" 'BEGIN {print a + b}')
        done
        declare -A sp=() busy=()
        for p in $POLICIES; do
            mix_ini "$1" "$2" "$p" $mix >"$T/mix.ini"
            v=""
            for s in $SEEDS; do
                sim "$s" "$T/mix.ini" "$T/mix.out"
                v+="$(ratio "$seq_s" "$(summary "$T/mix.out" makespan_s)") "
                busy[$p]=$(summary "$T/mix.out" busy)
            done
            sp[$p]=$(med "$v")
        done
        A2+="| $1 $2 | ${mix// /+} | $(awk -v s="$seq_s" 'BEGIN {printf "%.2f", s * 1000 / 60}') | ${sp[fifo]} | ${sp[priority]} | ${sp[pos]} | $(ratio "${sp[pos]}" "${sp[fifo]}") | ${busy[fifo]}, ${busy[pos]} |
"
    done
done

# ---- A3. SLO workloads (CoMPI-style) ---------------------------------------------------------
# three latency models with SLOs of 3x their solo mean latency, arrivals at LOAD of the device
# in all (a third each), beside one closed-loop batch resnet50
slo_ini() { # preset mode policy load arrival_kind(poisson|gamma)
    printf '[device]\npreset = %s\nmode = %s\n[sched]\npolicy = %s\n' "$1" "$2" "$3"
    for m in resnet18 mobilenet_v2 bert_base; do
        local solo_ms=${SOLO[$1,$m]}
        local rate slo arr
        rate=$(awk -v l="$4" -v s="$solo_ms" 'BEGIN {printf "%.2f", l / 3 / (s / 1000)}')
        slo=$(awk -v s="$solo_ms" 'BEGIN {printf "%.3f", 3 * s}')
        if [ "$5" = gamma ]; then arr="gamma:0.5:$rate"; else arr="poisson:$rate"; fi
        printf '[client %s]\nmodel = %s\nrequests = 300\narrival = %s\nclass_priority = 10\nslo_ms = %s\n' "$m" "$m" "$arr" "$slo"
    done
    printf '[client batch]\nmodel = resnet50\nrequests = 1000000\nclass_priority = 20\nstop_with = resnet18\n'
}
declare -A SOLO
SLO_DEVS=("xavier-nx mps" "rtx3080 mps" "xavier-nx timeslice")
for dev in "${SLO_DEVS[@]}"; do
    set -- $dev
    for m in resnet18 mobilenet_v2 bert_base; do
        mix_ini "$1" "$2" fifo "$m" >"$T/one.ini"
        sim 1 "$T/one.ini" "$T/one.out"
        SOLO[$1,$m]=$(col "$T/one.out" "m0-$m" mean_ms)
    done
done
echo "bench-pos: A3 SLO workloads..." >&2
A3="| device | arrivals, load | policy | SLO attainment resnet18 / mobilenet_v2 / bert_base (median) | p99 ms (same order) | batch launches/s | batch / fifo |
|---|---|---|---|---|---|---|
"
for dev in "${SLO_DEVS[@]}"; do
    set -- $dev
    for kind in poisson gamma; do
        for load in 0.5 0.7 0.9; do
            declare -A att=() p99=() bt=()
            for p in $POLICIES; do
                for s in $SEEDS; do
                    slo_ini "$1" "$2" "$p" "$load" "$kind" >"$T/slo.ini"
                    sim "$s" "$T/slo.ini" "$T/slo.out"
                    for m in resnet18 mobilenet_v2 bert_base; do
                        att[$p,$m]+="$(col "$T/slo.out" "$m" slo_ok) "
                        p99[$p,$m]+="$(col "$T/slo.out" "$m" p99_ms) "
                    done
                    bt[$p]+="$(col "$T/slo.out" batch launch_s) "
                done
            done
            for p in $POLICIES; do
                a="" q=""
                for m in resnet18 mobilenet_v2 bert_base; do
                    a+="$(med "${att[$p,$m]}") / "
                    q+="$(printf %.2f "$(med "${p99[$p,$m]}")") / "
                done
                A3+="| $1 $2 | $kind $load | $p | ${a% / } | ${q% / } | $(printf %.0f "$(med "${bt[$p]}")") | $(ratio "$(med "${bt[$p]}")" "$(med "${bt[fifo]}")") |
"
            done
        done
    done
done

# ---- A4. the cost of a decision ------------------------------------------------------------
echo "bench-pos: A4 decision cost..." >&2
{
    printf '[device]\npreset = h200\nmode = mps\n[sched]\npolicy = pos\n'
    for i in 0 1 2 3 4 5 6 7; do
        printf '[client c%d]\nmodel = resnet50\nrequests = 200\nclass_priority = %d\narrival = poisson:200\nslo_ms = 10\n' $i $((10 + 5 * (i % 3)))
    done
} >"$T/cost.ini"
cost=""
for s in $SEEDS; do
    "$POSSIM" --seed "$s" "$T/cost.ini" >"$T/cost.out"
    cost+="$(sed -n 's/.*, \([0-9.]*\) us per decision/\1/p' "$T/cost.out") "
done

# ---- B. end to end (real processes, simulated GPU) --------------------------------------------
B="" B0=""
if [ "$E2E" = 1 ]; then
    echo "bench-pos: B isolation rows end to end..." >&2
    export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock
    printf '[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n' >"$T/posd.conf"
    . bench/lib.sh
    field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | head -1 || true; }
    e2e_run() { # preset mode arrival policy|solo -> "p99_ms batch_launches_per_s"
        export POS_SIM_DEVICE=$1 POS_SIM_MODE=$2 POS_SIM_INSTANCE=bench-pos-$RANDOM-$$
        local n=150 pol=$4
        [ "$pol" = solo ] && pol=fifo
        posd_up "$pol"
        local pids=()
        if [ "$4" != solo ]; then
            for b in a b; do
                env POS_APP=batch-$b LD_PRELOAD=$SHIM $APP --model resnet50 --requests 100000000 --duration 60 >"$T/b$b.json" &
                pids+=($!)
            done
            sleep 0.3
        fi
        local lj
        lj=$(env POS_APP=lat LD_PRELOAD=$SHIM $APP --model resnet50 --requests $n --arrival "$3")
        local bsum=0
        for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
        for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
        posd_down
        rm -f "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"
        if [ "$4" != solo ]; then
            for b in a b; do
                local r
                r=$(field "$(cat "$T/b$b.json")" launches)
                local mk
                mk=$(field "$(cat "$T/b$b.json")" makespan_s)
                bsum=$(awk -v s="$bsum" -v l="${r:-0}" -v m="${mk:-0}" 'BEGIN {print (m > 0 ? s + l / m : s)}')
            done
        fi
        echo "$(field "$lj" p99_ms) $bsum"
    }
    B0="| preset | model | kernels >= 20 us | sampled | within 10% | largest error % |
|---|---|---|---|---|---|
"
    for preset in xavier-nx rtx3080; do
        export POS_SIM_DEVICE=$preset POS_SIM_MODE=timeslice POS_SIM_INSTANCE=bench-pos-acc-$$
        sd=$(mktemp -d "$T/acc.XXXXXX")
        rm -f "$POS_SOCKET"
        POSD_STATE_DIR=$sd $POSD -f -c "$T/posd.conf" -p pos >>"$T/posd.log" 2>&1 &
        POSD_PID=$!
        for _ in $(seq 150); do [ -S "$POS_SOCKET" ] && break; sleep 0.02; done
        env POS_APP=acc LD_PRELOAD=$SHIM $APP --model resnet50 --requests 50 >/dev/null
        posd_down
        rm -f "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"
        printf '[device]\npreset = %s\n[sched]\npolicy = priority\n[client m]\nmodel = resnet50\nrequests = 1\n' "$preset" >"$T/acc.ini"
        "$POSSIM" --profile-check "$T/acc.ini" >"$T/truth.out"
        # join posd's profiles with the model's durations by kernel key
        read -r nk ns nw mx <<<"$(awk 'NR == FNR {if ($1 == "k" && $6 > 0) mean[$3] = $7 / 1000; next}
            /^  kcheck/ && $6 >= 20 {n++; if ($4 in mean) {s++; e = 100 * (mean[$4] - $6) / $6; if (e < 0) e = -e; if (e <= 10) w++; if (e > m) m = e}}
            END {printf "%d %d %d %.1f", n, s, w, m}' "$sd/profiles" "$T/truth.out")"
        B0+="| $preset | resnet50 | $nk | $ns | $nw | $mx |
"
    done
    B="| preset, mode, latency arrivals | policy | e2e p99 / solo | possim p99 / solo | e2e batch launches/s | possim batch launches/s |
|---|---|---|---|---|---|
"
    for row in "xavier-nx timeslice closed" "xavier-nx mps closed" "h200 mps closed" \
               "xavier-nx mps poisson:40" "xavier-nx timeslice poisson:40" "h200 mps poisson:70"; do
        set -- $row
        read -r solo _ <<<"$(e2e_run "$1" "$2" "$3" solo)"
        for p in $POLICIES; do
            read -r p99 bls <<<"$(e2e_run "$1" "$2" "$3" "$p")"
            read -r sp sb <<<"${POSSIM_ISO[$row,$p]}"
            B+="| $row | $p | $(ratio "$p99" "$solo") | $sp | $(printf %.0f "$bls") | $sb |
"
        done
    done
fi

{
    echo "# pos policy results (simulated GPU)"
    echo
    echo "Generated by \`bash bench/pos.sh\` (\`make bench-pos\`; SEEDS=\"$SEEDS\", E2E=$E2E) on $(date -u +%Y-%m-%d),"
    echo "$(nproc) CPUs, $(uname -r). **Every figure is simulated**: part A runs in possim (virtual time,"
    echo "the scheduling core and policies posd runs, the simulated driver's device model); part B runs"
    echo "posd, libposshim.so and posapp as real processes on the simulated driver. No real GPU was used."
    echo "Medians over the seeds; ranges where given are the seeds' lowest and highest."
    echo
    echo "## A0. Kernel profile accuracy (possim)"
    echo
    echo "One model alone, 50 requests, under posd's core (profile_min 32): the solo mean it learnt of"
    echo "each kernel of 20 us or more against the device model's own duration of that kernel back to"
    echo "back behind itself (\`possim --profile-check\`). Target: within 10%. *sampled*: kernels with at"
    echo "least one solo sample (the first kernel of a request, launched after the previous request"
    echo "ended, never is)."
    echo
    printf '%s\n' "$A0"
    [ -n "$B0" ] && { echo "End to end (posd, the shim and posapp on the simulated driver, one run each): the profiles"; echo "posd saved against the same device-model figures."; echo; printf '%s\n' "$B0"; }
    echo "## A1. Isolation with throughput (possim)"
    echo
    echo "A latency resnet50 (300 requests, class latency) beside two closed-loop batch resnet50 clients"
    echo "(class batch), killed when it finishes. *solo*: the latency client alone under the same"
    echo "arrivals. *bound*: the two batch clients alone (fifo) times the share of time the device is"
    echo "idle with the latency client alone, the time-sharing bound; under MPS co-located kernels can"
    echo "exceed it, since the latency client leaves SMs idle while it runs."
    echo
    printf '%s\n' "$A1"
    echo "## A2. POS's mixes at batch 1 (possim)"
    echo
    echo "Three models as three processes of one class, closed loops of 60 requests each. *sequential*:"
    echo "each model alone, one after another (the round time is their total over 60). Speedup ="
    echo "sequential time / the mix's makespan. Xavier NX has no MPS (timeslice), so only ordering can"
    echo "help there. All three clients are of one class, so priority and pos let them run as fifo does;"
    echo "the searched schedule (possim search) is reported in docs/results/search.md."
    echo
    printf '%s\n' "$A2"
    echo "## A3. SLO workloads (possim)"
    echo
    echo "resnet18, mobilenet_v2 and bert_base with SLOs of 3x their solo mean latency, each with a third"
    echo "of the load, Poisson or Gamma (shape 0.5: bursty, CV 1.41) arrivals, 300 requests each; one"
    echo "closed-loop batch resnet50 beside them until resnet18 is done."
    echo
    printf '%s\n' "$A3"
    echo "## A4. Cost of a decision (possim)"
    echo
    echo "8 clients (resnet50, three classes, Poisson 200/s each, SLO 10 ms) on h200 mps under pos: real"
    echo "time per sched_core_decide call (the core's bookkeeping and the policy), per seed: $cost us."
    echo
    if [ -n "$B" ]; then
        echo "## B. Isolation rows end to end (real processes, simulated GPU)"
        echo
        echo "posd -p POLICY, the latency posapp (150 requests) and two batch posapps under the shim on the"
        echo "simulated driver (POS_SIM_DEVICE, POS_SIM_MODE), one run each, beside possim's medians (A1)."
        echo
        printf '%s\n' "$B"
    fi
} >"$OUT"
echo "bench-pos: wrote $OUT" >&2
