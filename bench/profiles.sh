#!/usr/bin/env bash
# Kernel profile accuracy end to end (simulated GPU): posd, libposshim.so and posapp as real
# processes on the simulated driver, one model alone under posd; the profiles posd saved at its
# exit against the device model's own duration of each kernel (possim --profile-check), for
# every kernel of 10 us or more, on the four presets. Each model runs twice side by side: with
# device times (the shim's timing events, shim/devtime.c) and with POS_DEVTIME=0 (the
# collector's poll times, as before). Writes docs/results/profiles.md.
#
#   bash bench/profiles.sh            (make bench-profiles runs it)
#   MODELS="resnet50" REQUESTS=30 ROUNDS=1 OUT=/tmp/profiles.md bash bench/profiles.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results/profiles.md}
MODELS=${MODELS:-resnet50 mobilenet_v2 inception_v3}
PRESETS=${PRESETS:-xavier-nx orin-agx rtx3080 h200}
REQUESTS=${REQUESTS:-50}
ROUNDS=${ROUNDS:-2} # the whole table again: how much a loaded host moves it
POSSIM=build/possim APP=build/posapp SHIM=build/libposshim.so POSD=build/posd
for f in $POSSIM $APP $SHIM $POSD; do [ -e "$f" ] || { echo "bench: build first (make)" >&2; exit 1; }; done
T=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"; rm -f /dev/shm/pos-sim.$(id -u).bench-prof-*-$$' EXIT
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock POS_SIM_MODE=timeslice
: >"$T/posd.conf"

# one posd and one posapp: preset model devtime state-dir; fails when posd was not there
posd_and_app() {
    rm -f "$POS_SOCKET" "$T/app.err"
    POSD_STATE_DIR=$4 $POSD -f -c "$T/posd.conf" -p priority >>"$T/posd.log" 2>&1 &
    local pid=$! rc=0
    for _ in $(seq 500); do [ -S "$POS_SOCKET" ] && break; sleep 0.02; done
    env POS_APP=prof POS_MODE=scheduled POS_DEVTIME="$3" LD_PRELOAD=$SHIM $APP --model "$2" \
        --requests "$REQUESTS" >/dev/null 2>"$T/app.err" || rc=1
    cat "$T/app.err" >>"$T/app.log"
    grep -q 'no posd' "$T/app.err" && rc=1
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ -s "$4/profiles" ] || rc=1
    return $rc
}

# one run: preset model devtime -> "kernels sampled within10 maxerr" (kernels >= 10 us); a run
# whose posd was not there (a loaded host) is run again, once
run() {
    export POS_SIM_DEVICE=$1 POS_SIM_INSTANCE=bench-prof-$1-$3-$$
    local sd
    sd=$(mktemp -d "$T/state.XXXXXX")
    if ! posd_and_app "$1" "$2" "$3" "$sd"; then
        echo "bench: $1 $2 POS_DEVTIME=$3: posd missed the run; again" >&2
        sd=$(mktemp -d "$T/state.XXXXXX")
        posd_and_app "$1" "$2" "$3" "$sd" || echo "bench: $1 $2 POS_DEVTIME=$3: again missed" >&2
    fi
    rm -f "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"
    printf '[device]\npreset = %s\n[sched]\npolicy = priority\n[client m]\nmodel = %s\nrequests = 1\n' \
        "$1" "$2" >"$T/truth.ini"
    "$POSSIM" --profile-check "$T/truth.ini" >"$T/truth.out"
    # posd's profiles (k lines: key in $3, solo samples in $6, mean ns in $7) joined with the
    # model's durations by kernel key
    awk 'NR == FNR {if ($1 == "k" && $6 > 0) mean[$3] = $7 / 1000; next}
        /^  kcheck/ && $6 >= 10 {n++; if ($4 in mean) {s++; e = 100 * (mean[$4] - $6) / $6; if (e < 0) e = -e; if (e <= 10) w++; if (e > m) m = e}}
        END {printf "%d %d %d %.1f", n, s, w, m}' "$sd/profiles" "$T/truth.out" 2>/dev/null ||
        echo "- - - -"
}

echo "bench: profile accuracy end to end..." >&2
TABLE="| round | preset | model | kernels >= 10 us | device times: sampled | within 10% | largest error % | poll times: sampled | within 10% | largest error % |
|---|---|---|---|---|---|---|---|---|---|
"
SUM="| round | preset | kernels >= 10 us | within 10% with device times | share | target (>= 95%) | within 10% with poll times |
|---|---|---|---|---|---|---|
"
tot_n=0 tot_w=0 tot_pw=0
for round in $(seq "$ROUNDS"); do
    for preset in $PRESETS; do
        pn=0 pw=0 ppw=0
        for m in $MODELS; do
            read -r n s w mx <<<"$(run "$preset" "$m" 1)"
            read -r _ ps pws pmx <<<"$(run "$preset" "$m" 0)"
            num() { [[ $1 =~ ^[0-9]+$ ]] && echo "$1" || echo 0; }
            n=$(num "$n") w=$(num "$w") pws=$(num "$pws")
            TABLE+="| $round | $preset | $m | $n | $s | $w | $mx | $ps | $pws | $pmx |
"
            pn=$((pn + n)) pw=$((pw + w)) ppw=$((ppw + pws))
            tot_n=$((tot_n + n)) tot_w=$((tot_w + w)) tot_pw=$((tot_pw + pws))
        done
        share=$(awk -v w="$pw" -v n="$pn" 'BEGIN {printf "%.1f%%", n ? 100 * w / n : 0}')
        met=$(awk -v w="$pw" -v n="$pn" 'BEGIN {print (n && w >= 0.95 * n) ? "met" : "missed"}')
        SUM+="| $round | $preset | $pn | $pw | $share | $met | $ppw |
"
    done
done

cpu=$(sed -n 's/^model name[ \t]*: //p' /proc/cpuinfo | head -1)
cat >"$OUT" <<EOM
# Kernel profiles end to end: device times against poll times

**Simulated GPU.** Produced by \`bash bench/profiles.sh\` (\`make bench-profiles\`; MODELS="$MODELS",
REQUESTS=$REQUESTS, ROUNDS=$ROUNDS) on $(date -u +%Y-%m-%d), $(nproc) cores ($cpu), commit
$(git rev-parse --short HEAD 2>/dev/null || echo unknown). No real GPU was used: the device times
are the simulated driver's event times, which are virtual-GPU times.

Each row: posd (policy priority, a fresh state directory) and one posapp of the model alone
(class default, $REQUESTS requests, one stream) under \`libposshim.so\` on the simulated driver
(timeslice), then posd's saved profiles (the solo mean of each kernel shape) against the device
model's own duration of that kernel back to back behind itself (\`possim --profile-check\`), for
every kernel of 10 us or more. *device times*: the shim's default, a timing event behind each
sampled launch; *poll times*: the same run with \`POS_DEVTIME=0\`, the collector's poll times as
before. Run side by side, one after the other, on the same build. Target: within 10% for at least
95% of the kernels of 10 us or more, on all four presets.

$SUM
All rounds, all kernels: $tot_w of $tot_n within 10% with device times, $tot_pw of $tot_n with
poll times. *sampled*: kernels posd has a solo profile of; a kernel never queued behind its
predecessor (the first of a request, launched after the previous request ended) has none with
device times, and counts as outside 10%.

A row whose kernels none were sampled in either mode (the two runs of the model, with device
times and with poll times, both 0) would be a run in which posd learnt no profile at all: its
saved profile file holds no kernel. Before commit 967e71f that happened in about 1 run of 3 with
mobilenet_v2 on orin-agx (50 requests, about 40 ms). A lone client launching freely never woke
posd during the run, so posd asked it for no more than the default marker in 32 launches. posd
then read its completions only at its leave, after the synchronisations that covered them, and
ignored them. Now a new client gets a marker behind each of its first 256 launches, and an end
read late still teaches the profile (docs/policy.md, profile_min). Such a row counts here as
outside 10%.

$TABLE
EOM
echo "bench: wrote $OUT" >&2
