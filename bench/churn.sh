#!/bin/bash
# Clients that come and go (simulated GPU): batch processes that start, run a few hundred
# milliseconds and exit, one every half second, beside a latency client that runs throughout;
# end to end (posd + libposshim.so + posapp on the simulated driver) and in possim on the same
# scenario. For each policy: the latency client's p50, p99 and SLO attainment, its p99 against
# its solo run under the same policy, and the batch clients' throughput (their requests over
# their active times) against the run without posd. Writes docs/results/churn.md.
#
#   bash bench/churn.sh                       (make bench-churn runs it)
#   REPS=1 SCEN=ts OUT=/tmp/c.md bash bench/churn.sh
#
# Targets (issue 19): latency p99 <= 1.10 x solo and batch >= 0.9 x the run without posd.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
OUT=${OUT:-docs/results/churn.md}
SCEN=${SCEN:-ts mps}
POLICIES=${POLICIES:-none priority pos}
CHURN_N=${CHURN_N:-9}       # batch processes, one every CHURN_GAP_MS from 200 ms on
CHURN_GAP_MS=${CHURN_GAP_MS:-500}
T=$(mktemp -d)
POSD_PID=
cleanup() {
    [ -n "$POSD_PID" ] && kill "$POSD_PID" 2>/dev/null
    jobs -p | xargs -r kill 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$T"
    rm -f /dev/shm/pos-sim."$(id -u)".bench-churn-*-$$
}
trap cleanup EXIT
APP=build/posapp SHIM=build/libposshim.so POSD=build/posd POSSIM=build/possim
for f in $APP $SHIM $POSD $POSSIM; do
    [ -e "$f" ] || { echo "bench-churn: build first (make)" >&2; exit 1; }
done
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock
. bench/lib.sh

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | head -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "null"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
fmt() { awk -v v="$1" 'BEGIN {if (v == "null" || v == "") print "-"; else if (v + 0 >= 100) printf "%.0f", v; else if (v + 0 >= 1) printf "%.2f", v; else printf "%.3f", v}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "null" || b == "null" || b == 0) print "-"; else printf "%.3f", a / b}'; }

# ---- the scenarios -------------------------------------------------------------------------
# A scenario: its device and mode, the latency client's posapp arguments and SLO, and the batch
# processes' models (one per process, in turn) with their batch size and requests.
declare -A DEV MODE LAT LATN SLO BMODELS BATCH
DEV[ts]=orin-agx MODE[ts]=timeslice
LAT[ts]="--model resnet18 --arrival poisson:20" LATN[ts]=100 SLO[ts]=5
BMODELS[ts]="resnet50:60" BATCH[ts]=1
DEV[mps]=h200 MODE[mps]=mps
LAT[mps]="--model resnet50 --arrival poisson:200" LATN[mps]=1000 SLO[mps]=4
BMODELS[mps]="resnet18:250 mobilenet_v2:800 inception_v3:75" BATCH[mps]=8
declare -A TEXT=(
    [ts]="**ts**: orin-agx, time-sliced. A latency resnet18 (Poisson 20/s, ${LATN[ts]} requests, SLO ${SLO[ts]} ms)
from 0 s; $CHURN_N batch resnet50 processes of 60 requests each, one started every
${CHURN_GAP_MS} ms from 200 ms on (each runs about 0.25 s alone and exits before the next)."
    [mps]="**mps**: h200 with MPS. A latency resnet50 (Poisson 200/s, ${LATN[mps]} requests, SLO ${SLO[mps]} ms)
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

posd_conf() { # scenario
    printf '[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n[rule lat]\nmatch_app = lat\nslo_ms = %s\n' \
        "${SLO[$1]}" >"$T/posd.conf"
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
    export POS_SIM_INSTANCE=bench-churn-$s-$pol-$$
    [ "$pol" = none ] || { posd_conf "$s"; posd_up "$pol"; }
    local t0 pids=() k
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    run_app lat ${LAT[$s]} --requests "${LATN[$s]}" --slo "${SLO[$s]}" &
    pids+=($!)
    if [ -z "$solo" ]; then
        for ((k = 0; k < CHURN_N; k++)); do
            sleep "$(awk -v t0="$t0" -v now="$(date +%s%N)" -v at=$((200 + CHURN_GAP_MS * k)) \
                'BEGIN {d = (t0 + at * 1e6 - now) / 1e9; printf "%.3f", (d > 0 ? d : 0)}')"
            read -r m n <<<"$(bmodel "$s" "$k")"
            run_app "batch-c$k" --model "$m" --batch "${BATCH[$s]}" --requests "$n" &
            pids+=($!)
        done
    fi
    wait "${pids[@]}"
    [ "$pol" = none ] || posd_down
    rm -f "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"
}
# The run's figures from $T/o: "p50 p99 slo batch_rps" (batch: all requests over the summed
# active times of the batch processes, which do not overlap, or overlap little)
real_figs() {
    local j req=0 span=0 f
    j=$(cat "$T/o/lat.json")
    for f in "$T"/o/batch-c*.json; do
        [ -e "$f" ] || continue
        req=$(awk -v a="$req" -v b="$(field "$(cat "$f")" requests)" 'BEGIN {print a + b}')
        span=$(awk -v a="$span" -v b="$(field "$(cat "$f")" makespan_s)" 'BEGIN {print a + b}')
    done
    echo "$(field "$j" p50_ms) $(field "$j" p99_ms) $(field "$j" slo_attainment) $(awk -v r="$req" -v s="$span" 'BEGIN {print (s > 0 ? r / s : "null")}')"
}

# The possim scenario: scenario policy [solo]
ini() {
    local s=$1 pol=$2 solo=${3:-} k m n
    printf '[device]\npreset = %s\nmode = %s\nnotify_us = %s\n[sched]\npolicy = %s\n' \
        "${DEV[$s]}" "${MODE[$s]}" "$NOTIFY_US" "$pol"
    # shellcheck disable=SC2086
    set -- ${LAT[$s]}
    printf '[client lat]\nmodel = %s\nrequests = %s\narrival = %s\nslo_ms = %s\nclass_priority = 10\n' \
        "$2" "${LATN[$s]}" "$4" "${SLO[$s]}"
    [ -n "$solo" ] && return
    for ((k = 0; k < CHURN_N; k++)); do
        read -r m n <<<"$(bmodel "$s" "$k")"
        printf '[client batch-c%d]\nmodel = %s\nbatch = %s\nrequests = %s\nclass_priority = 20\nstart_ms = %d\n' \
            "$k" "$m" "${BATCH[$s]}" "$n" $((200 + CHURN_GAP_MS * k))
    done
}
sim_figs() { # possim JSON -> "p50 p99 slo batch_rps"
    local recs lat req=0 span=0 name j
    recs=$(sed 's/{"name":"/\n/g' <<<"$1" | tail -n +2 | sed 's/^\([^"]*\)",/\1 /')
    lat=$(awk '$1 == "lat" {print $2}' <<<"$recs")
    while read -r name j; do
        [[ $name == batch-c* ]] || continue
        req=$(awk -v a="$req" -v b="$(field "$j" requests)" 'BEGIN {print a + b}')
        span=$(awk -v a="$span" -v b="$(field "$j" active_s)" 'BEGIN {print a + b}')
    done <<<"$recs"
    echo "$(field "$lat" p50_ms) $(field "$lat" p99_ms) $(field "$lat" slo_attainment) $(awk -v r="$req" -v s="$span" 'BEGIN {print (s > 0 ? r / s : "null")}')"
}

# ---- calibration, as bench/e2e.sh does it: the simulated driver's completion lag --------------
start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
NOTIFY_US=$(notify_us_calibrate "$REPS" bench-churn-cal-$$)
echo "bench-churn: notify_us = $NOTIFY_US" >&2

# ---- run: the policies in turn, REPS rounds, each policy's solo run beside its churn run -------
declare -A R S # [scenario|policy|solo-or-churn]: real figure lines (one per round); possim's
for s in $SCEN; do
    for pol in $POLICIES; do
        for kind in solo churn; do
            S[$s|$pol|$kind]=$(sim_figs "$($POSSIM -o json <(ini "$s" "$pol" "$([ $kind = solo ] && echo solo)"))")
        done
    done
    for ((r = 0; r < REPS; r++)); do
        for pol in $POLICIES; do
            echo "bench-churn: $s $pol round $((r + 1))/$REPS..." >&2
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
    echo "# Churn: clients that come and go beside a latency client"
    echo
    echo "**Simulated GPU, both sides: every figure here is simulated.** Produced by"
    echo "\`make bench-churn\` (REPS=$REPS) on $(date -u +%Y-%m-%d), $(nproc) cores, commit"
    echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown), in ${elapsed} s; load average (1, 5, 15 min) $load0 at the start, $load1 at the end."
    echo
    echo "*End to end*: posd (\`-p POLICY\`, a fresh state directory each run; rules: \`match_app = batch*\` →"
    echo "class batch, \`match_app = lat\` → the SLO) with posapp clients under \`libposshim.so\` on the"
    echo "simulated driver; *none*: the same processes without posd (the shim passes through). The"
    echo "median of $REPS rounds (every round listed; the policies alternate within a round). *solo*: the"
    echo "latency client alone under the same policy. Batch throughput: all batch requests over the"
    echo "batch processes' summed active times (first request to last completion). *possim*: the same"
    echo "scenario in possim (\`[device] notify_us = $NOTIFY_US\`, calibrated as bench/e2e.sh does; its host model"
    echo "at its default)."
    echo
    echo "Targets (issue 19): latency p99 **≤ 1.10 x solo** and batch **≥ 0.9 x** the run without posd."
    for s in $SCEN; do
        echo
        echo "${TEXT[$s]}"
        echo
        echo "| policy | latency p50 ms | p99 ms | p99 runs | solo p99 ms | **p99 / solo** | SLO attainment | batch req/s | batch runs | **batch / none** | possim p99 / solo | possim batch / none |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
        nb=$(med "${R[$s|none|churn]:-}" 4)
        snb=$(col 4 <<<"${S[$s|none|churn]:-}")
        for pol in $POLICIES; do
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
echo "bench-churn: wrote $OUT" >&2
