#!/bin/bash
# Isolation end to end (simulated GPU): a latency client beside batch processes of other models,
# end to end (posd + libposshim.so + posapp on the simulated driver) and in possim on the same
# scenario. Two kinds of scenario: *steady*, batch closed loops that run throughout (started
# before the latency client, stopped when it is done); *churn*, batch processes that start,
# run a few hundred milliseconds and exit, one every half second. For each policy: the latency
# client's p50, p99 and SLO attainment, its p99 against its solo run under the same policy,
# and the batch throughput (launches over the batch processes' active times) against the
# scenario's baseline: fifo's (steady) or the run without posd (churn). Writes
# docs/results/isolation.md.
#
#   bash bench/isolation.sh                   (make bench-isolation runs it)
#   REPS=1 SCEN=churn-ts OUT=/tmp/i.md bash bench/isolation.sh
#   CPU=nice OUT=docs/results/isolation-nice.md bash bench/isolation.sh   (posd's CPU lever)
#   POS_KEYS="corun_room = 16" OUT=/tmp/i.md bash bench/isolation.sh      (a pos+ row: pos so set)
#
# Targets (issue 19): latency p99 <= 1.10 x solo, with batch >= 0.8 x fifo's (steady, rtx3080
# and h200 MPS) and >= 0.9 x the run without posd (churn).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
OUT=${OUT:-docs/results/isolation.md}
SCEN_GIVEN=${SCEN:+1} # named in the results' header when given
SCEN=${SCEN:-steady-rtx3080 steady-h200 churn-ts churn-mps}
CHURN_N=${CHURN_N:-9}       # batch processes, one every CHURN_GAP_MS from 200 ms on
CHURN_GAP_MS=${CHURN_GAP_MS:-500}
CPU=${CPU:-off}             # posd.conf's (and possim's) [policy] cpu: off, idle or nice
case $CPU in off | idle | nice) ;; *) echo "bench-isolation: CPU=$CPU: off, idle or nice" >&2; exit 2 ;; esac
# POS_KEYS="KEY = VALUE; ...": one more policy row, pos+, which is pos with these keys in posd.conf's
# [policy] and possim's [sched] (POS_KEYS="corun_room = 16; window_us = 2000"), run side by side
# with the others in every round
POS_KEYS=${POS_KEYS:-}
policy_of() { echo "${1%+}"; } # a row's policy: pos+ is pos
policy_keys() { # row: its extra keys, a line each
    [ "$1" = pos+ ] && tr ';' '\n' <<<"$POS_KEYS" | sed 's/^ *//; s/ *$//' | grep -v '^$'
    true
}
T=$(mktemp -d)
POSD_PID=
cleanup() {
    [ -n "$POSD_PID" ] && kill "$POSD_PID" 2>/dev/null
    jobs -p | xargs -r kill 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$T"
    rm -f /dev/shm/pos-sim."$(id -u)".bench-isolation-*-$$
}
trap cleanup EXIT
APP=build/posapp SHIM=build/libposshim.so POSD=build/posd POSSIM=build/possim
for f in $APP $SHIM $POSD $POSSIM; do
    [ -e "$f" ] || { echo "bench-isolation: build first (make)" >&2; exit 1; }
done
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock
. bench/lib.sh

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | head -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "null"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
fmt() { awk -v v="$1" 'BEGIN {if (v == "null" || v == "") print "-"; else if (v + 0 >= 100) printf "%.0f", v; else if (v + 0 >= 1) printf "%.2f", v; else printf "%.3f", v}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "null" || b == "null" || b == 0) print "-"; else printf "%.3f", a / b}'; }

# ---- the scenarios -------------------------------------------------------------------------
# A scenario: its kind, device and mode, the latency client's posapp arguments, requests and
# SLO, the batch processes' models (MODEL:REQUESTS; steady: one process each, closed loops;
# churn: one per process, in turn) with their batch size, the policies, and the baseline of
# the batch figure.
declare -A KIND DEV MODE LAT LATN SLO BMODELS BATCH POLS BASE
KIND[steady-rtx3080]=steady DEV[steady-rtx3080]=rtx3080 MODE[steady-rtx3080]=mps
LAT[steady-rtx3080]="--model resnet50 --arrival closed" LATN[steady-rtx3080]=400 SLO[steady-rtx3080]=5
BMODELS[steady-rtx3080]="resnet18:0 inception_v3:0" BATCH[steady-rtx3080]=1
KIND[steady-h200]=steady DEV[steady-h200]=h200 MODE[steady-h200]=mps
LAT[steady-h200]="--model resnet50 --arrival closed" LATN[steady-h200]=400 SLO[steady-h200]=4
BMODELS[steady-h200]="resnet18:0 inception_v3:0" BATCH[steady-h200]=8
KIND[churn-ts]=churn DEV[churn-ts]=orin-agx MODE[churn-ts]=timeslice
LAT[churn-ts]="--model resnet18 --arrival poisson:20" LATN[churn-ts]=100 SLO[churn-ts]=5
BMODELS[churn-ts]="resnet50:60" BATCH[churn-ts]=1
KIND[churn-mps]=churn DEV[churn-mps]=h200 MODE[churn-mps]=mps
LAT[churn-mps]="--model resnet50 --arrival poisson:200" LATN[churn-mps]=1000 SLO[churn-mps]=4
BMODELS[churn-mps]="resnet18:250 mobilenet_v2:800 inception_v3:75" BATCH[churn-mps]=8
for s in "${!KIND[@]}"; do
    if [ "${KIND[$s]}" = steady ]; then POLS[$s]="fifo priority pos" BASE[$s]=fifo; else POLS[$s]="none priority pos" BASE[$s]=none; fi
    [ -n "$POS_KEYS" ] && POLS[$s]+=" pos+"
done
declare -A TEXT=(
    [steady-rtx3080]="**steady-rtx3080**: rtx3080 with MPS. A latency resnet50 closed loop of ${LATN[steady-rtx3080]} requests
(SLO ${SLO[steady-rtx3080]} ms), started 0.3 s after batch resnet18 and inception_v3 closed loops (batch 1), which are
stopped when it is done (SIGINT; possim: \`stop_with\`)."
    [steady-h200]="**steady-h200**: h200 with MPS. A latency resnet50 closed loop of ${LATN[steady-h200]} requests
(SLO ${SLO[steady-h200]} ms), started 0.3 s after batch resnet18 and inception_v3 closed loops at batch 8, which
are stopped when it is done."
    [churn-ts]="**churn-ts**: orin-agx, time-sliced. A latency resnet18 (Poisson 20/s, ${LATN[churn-ts]} requests, SLO ${SLO[churn-ts]} ms)
from 0 s; $CHURN_N batch resnet50 processes of 60 requests each, one started every
${CHURN_GAP_MS} ms from 200 ms on (each runs about 0.25 s alone and exits before the next)."
    [churn-mps]="**churn-mps**: h200 with MPS. A latency resnet50 (Poisson 200/s, ${LATN[churn-mps]} requests, SLO ${SLO[churn-mps]} ms)
from 0 s; $CHURN_N batch processes at batch 8, in turn resnet18 (250 requests), mobilenet_v2 (800)
and inception_v3 (75), one started every ${CHURN_GAP_MS} ms from 200 ms on (each about 0.25 s
alone)."
)
bmodel() { # scenario k -> "model requests"
    local -a ms
    read -ra ms <<<"${BMODELS[$1]}"
    local m=${ms[$(($2 % ${#ms[@]}))]}
    echo "${m%%:*} ${m#*:}"
}

posd_conf() { # scenario row
    {
        printf '[policy]\ncpu = %s\n' "$CPU"
        policy_keys "$2"
        printf '[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n[rule lat]\nmatch_app = lat\nslo_ms = %s\n' \
            "${SLO[$1]}"
    } >"$T/posd.conf"
}
run_app() { # name args...: posapp under the shim, its JSON in $T/o/NAME.json
    local name=$1
    shift
    POS_APP=$name LD_PRELOAD=$SHIM exec $APP "$@" >"$T/o/$name.json"
}

# One real run: scenario policy [solo]
real_run() {
    local s=$1 pol=$2 solo=${3:-}
    rm -rf "$T/o" && mkdir "$T/o"
    export POS_SIM_DEVICE=${DEV[$s]} POS_SIM_MODE=${MODE[$s]}
    export POS_SIM_INSTANCE=bench-isolation-$s-${pol/+/-keys}-$$
    [ "$pol" = none ] || { posd_conf "$s" "$pol"; posd_up "$(policy_of "$pol")"; }
    local t0 pids=() bg=() k m n
    if [ "${KIND[$s]}" = steady ] && [ -z "$solo" ]; then
        k=0
        for m in ${BMODELS[$s]}; do
            run_app "batch-c$k" --model "${m%%:*}" --batch "${BATCH[$s]}" --requests 100000000 --duration 600 &
            bg+=($!)
            k=$((k + 1))
        done
        sleep 0.3
    fi
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    run_app lat ${LAT[$s]} --requests "${LATN[$s]}" --slo "${SLO[$s]}" &
    pids+=($!)
    if [ "${KIND[$s]}" = churn ] && [ -z "$solo" ]; then
        for ((k = 0; k < CHURN_N; k++)); do
            sleep "$(awk -v t0="$t0" -v now="$(date +%s%N)" -v at=$((200 + CHURN_GAP_MS * k)) \
                'BEGIN {d = (t0 + at * 1e6 - now) / 1e9; printf "%.3f", (d > 0 ? d : 0)}')"
            read -r m n <<<"$(bmodel "$s" "$k")"
            run_app "batch-c$k" --model "$m" --batch "${BATCH[$s]}" --requests "$n" &
            pids+=($!)
        done
    fi
    wait "${pids[@]}"
    if [ ${#bg[@]} -gt 0 ]; then
        kill -INT "${bg[@]}" 2>/dev/null || true
        wait "${bg[@]}" 2>/dev/null || true
    fi
    [ "$pol" = none ] || posd_down
    rm -f "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"
}
# The run's figures from $T/o: "p50 p99 slo batch" (batch: all batch launches over the summed
# active times of the batch processes, first request to last completion or the stop)
real_figs() {
    local j l=0 span=0 f
    j=$(cat "$T/o/lat.json")
    for f in "$T"/o/batch-c*.json; do
        [ -e "$f" ] || continue
        l=$(awk -v a="$l" -v b="$(field "$(cat "$f")" launches)" 'BEGIN {print a + b}')
        span=$(awk -v a="$span" -v b="$(field "$(cat "$f")" makespan_s)" 'BEGIN {print a + b}')
    done
    echo "$(field "$j" p50_ms) $(field "$j" p99_ms) $(field "$j" slo_attainment) $(awk -v r="$l" -v s="$span" 'BEGIN {print (s > 0 ? r / s : "null")}')"
}

# The possim scenario: scenario policy [solo]
ini() {
    local s=$1 pol=$2 solo=${3:-} k m n start=0
    printf '[device]\npreset = %s\nmode = %s\nnotify_us = %s\n[sched]\npolicy = %s\ncpu = %s\n' \
        "${DEV[$s]}" "${MODE[$s]}" "$NOTIFY_US" "$(policy_of "$pol")" "$CPU"
    policy_keys "$pol"
    [ "${KIND[$s]}" = steady ] && [ -z "$solo" ] && start=300
    # shellcheck disable=SC2086
    set -- ${LAT[$s]}
    printf '[client lat]\nmodel = %s\nrequests = %s\narrival = %s\nslo_ms = %s\nclass_priority = 10\nstart_ms = %s\n' \
        "$2" "${LATN[$s]}" "$4" "${SLO[$s]}" "$start"
    [ -n "$solo" ] && return
    if [ "${KIND[$s]}" = steady ]; then
        k=0
        for m in ${BMODELS[$s]}; do
            printf '[client batch-c%d]\nmodel = %s\nbatch = %s\nrequests = 100000000\nclass_priority = 20\nstop_with = lat\n' \
                "$k" "${m%%:*}" "${BATCH[$s]}"
            k=$((k + 1))
        done
        return
    fi
    for ((k = 0; k < CHURN_N; k++)); do
        read -r m n <<<"$(bmodel "$s" "$k")"
        printf '[client batch-c%d]\nmodel = %s\nbatch = %s\nrequests = %s\nclass_priority = 20\nstart_ms = %d\n' \
            "$k" "$m" "${BATCH[$s]}" "$n" $((200 + CHURN_GAP_MS * k))
    done
}
sim_figs() { # possim JSON -> "p50 p99 slo batch"
    local recs lat l=0 span=0 name j
    recs=$(sed 's/{"name":"/\n/g' <<<"$1" | tail -n +2 | sed 's/^\([^"]*\)",/\1 /')
    lat=$(awk '$1 == "lat" {print $2}' <<<"$recs")
    while read -r name j; do
        [[ $name == batch-c* ]] || continue
        l=$(awk -v a="$l" -v b="$(field "$j" launches)" 'BEGIN {print a + b}')
        span=$(awk -v a="$span" -v b="$(field "$j" active_s)" 'BEGIN {print a + b}')
    done <<<"$recs"
    echo "$(field "$lat" p50_ms) $(field "$lat" p99_ms) $(field "$lat" slo_attainment) $(awk -v r="$l" -v s="$span" 'BEGIN {print (s > 0 ? r / s : "null")}')"
}

# ---- calibration, as bench/e2e.sh does it: the simulated driver's completion lag --------------
start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
read -r NOTIFY_US _ <<<"$(notify_us_calibrate "$REPS" bench-isolation-cal-$$)"
echo "bench-isolation: notify_us = $NOTIFY_US" >&2

# ---- run: the policies in turn, REPS rounds, each policy's solo run beside its churn run -------
declare -A R S # [scenario|policy|solo-or-churn]: real figure lines (one per round); possim's
for s in $SCEN; do
    for pol in ${POLS[$s]}; do
        for kind in solo churn; do
            S[$s|$pol|$kind]=$(sim_figs "$($POSSIM -o json <(ini "$s" "$pol" "$([ $kind = solo ] && echo solo)"))")
        done
    done
    for ((r = 0; r < REPS; r++)); do
        for pol in ${POLS[$s]}; do
            echo "bench-isolation: $s $pol round $((r + 1))/$REPS..." >&2
            real_run "$s" "$pol" solo
            R[$s|$pol|solo]+="$(real_figs)"$'\n'
            real_run "$s" "$pol"
            R[$s|$pol|churn]+="$(real_figs)"$'\n'
        done
    done
done
elapsed=$(($(date +%s) - start))
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report --------------------------------------------------------------------------------
col() { awk -v c="$1" 'NF {print $c}'; }  # one figure of every round
med() { col "$2" <<<"$1" | median; }
runs() { col "$2" <<<"$1" | while read -r v; do printf '%s ' "$(fmt "$v")"; done; }
{
    echo "# Isolation end to end: a latency client beside batch work that stays or comes and goes"
    echo
    echo "**Simulated GPU, both sides: every figure here is simulated.** Produced by"
    echo "\`make bench-isolation\` (REPS=$REPS CPU=$CPU${SCEN_GIVEN:+ SCEN=\"$SCEN\"}${POS_KEYS:+ POS_KEYS=\"$POS_KEYS\"}) on $(date -u +%Y-%m-%d), $(nproc) cores, commit"
    echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown), in ${elapsed} s; load average (1, 5, 15 min) $load0 at the start, $load1 at the end."
    echo
    echo "*End to end*: posd (\`-p POLICY\`, \`[policy] cpu = $CPU\`, a fresh state directory each run; rules: \`match_app = batch*\` →"
    echo "class batch, \`match_app = lat\` → the SLO) with posapp clients under \`libposshim.so\` on the"
    echo "simulated driver; *none*: the same processes without posd (the shim passes through). The"
    echo "median of $REPS rounds (every round listed; the policies alternate within a round). *solo*: the"
    echo "latency client alone under the same policy. Batch throughput: all batch launches over the"
    echo "batch processes' summed active times (first request to last completion or the stop), against"
    echo "fifo's (steady) or the run without posd (churn). *possim*: the same"
    echo "scenario in possim (\`[device] notify_us = $NOTIFY_US\`, calibrated as bench/e2e.sh does; its host model"
    echo "at its default)."
    [ -n "$POS_KEYS" ] && echo "*pos+*: pos with \`$POS_KEYS\` in posd.conf's \`[policy]\` and possim's \`[sched]\`, in the same rounds."
    echo
    echo "Targets (issue 19): latency p99 **≤ 1.10 x solo**, with batch **≥ 0.8 x** fifo's (steady) and"
    echo "**≥ 0.9 x** the run without posd (churn)."
    for s in $SCEN; do
        echo
        echo "${TEXT[$s]}"
        echo
        b0=${BASE[$s]}
        echo "| policy | latency p50 ms | p99 ms | p99 runs | solo p99 ms | **p99 / solo** | SLO attainment | batch launches/s | batch runs | **batch / $b0** | possim p99 / solo | possim batch / $b0 |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
        nb=$(med "${R[$s|$b0|churn]:-}" 4)
        snb=$(col 4 <<<"${S[$s|$b0|churn]:-}")
        for pol in ${POLS[$s]}; do
            c=${R[$s|$pol|churn]} so=${R[$s|$pol|solo]}
            p99=$(med "$c" 2) sp99=$(med "$so" 2) b=$(med "$c" 4)
            sc=${S[$s|$pol|churn]} ss=${S[$s|$pol|solo]}
            echo "| $pol | $(fmt "$(med "$c" 1)") | $(fmt "$p99") | $(runs "$c" 2)| $(fmt "$sp99") | $(ratio "$p99" "$sp99") | $(fmt "$(med "$c" 3)") | $(fmt "$b") | $(runs "$c" 4)| $(ratio "$b" "$nb") | $(ratio "$(col 2 <<<"$sc")" "$(col 2 <<<"$ss")") | $(ratio "$(col 4 <<<"$sc")" "$snb") |"
        done
    done
    echo
    echo "The spread of the rounds is this shared 2-core machine's; p99 of a few hundred requests"
    echo "moves most."
} >"$OUT"
echo "bench-isolation: wrote $OUT" >&2
