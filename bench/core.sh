#!/usr/bin/env bash
# Scheduling-core benchmark (simulated GPU, real processes: posd + libposshim.so + posapp on
# the simulated driver): work conservation (a batch client alone; beside a sparse latency
# client; the isolation case), the bound on a stopped latency client, how soon posd knows a
# request ended (sync report lag), posd's request figures against posapp's own, and the grant
# latency real clients see. Writes docs/results/core.md.
#
#   bash bench/core.sh            (make bench runs it)
#   REPS=5 OUT=/tmp/c.md bash bench/core.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
OUT=${OUT:-docs/results/core.md}
T=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"' EXIT
APP=build/posapp SHIM=build/libposshim.so POSD=build/posd POSSTAT=build/posstat
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock POS_SIM_MODE=timeslice
unset POS_SIM_DEVICE
for f in $APP $SHIM $POSD $POSSTAT; do [ -e "$f" ] || { echo "bench: build first (make)" >&2; exit 1; }; done

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | head -1 || true; }
# FIELD of client APP in a posstat JSON report
cfield() { { grep -o "\"app\":\"$2\"[^}]*" <<<"$1" || true; } | sed -n "s/.*\"$3\":\([^,}]*\).*/\1/p" | head -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b == 0 || a == "-" || b == "-") print "-"; else printf "%.2f", a / b}'; }
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
# launches so far of client APP in a posstat JSON report
launched() { awk -v r="$(cfield "$1" "$2" launches_per_s)" -v t="$(cfield "$1" "$2" span_s)" 'BEGIN {printf "%.0f", r * t}'; }

cat >"$T/posd.conf" <<'EOF'
[rule batch-jobs]
match_app = batch*
class = batch

[rule capped]
match_app = capped*
class = batch
max_inflight = 1

[rule wide]
match_app = wide*
class = batch
max_inflight = 256
EOF

. bench/lib.sh
inst() { export POS_SIM_INSTANCE=bench-core-$1-$$; }
# app NAME SHIMMED(0|1) ARGS... : one posapp run, its JSON on stdout
app() {
    local name=$1 shimmed=$2
    shift 2
    if [ "$shimmed" = 1 ]; then
        env POS_APP="$name" LD_PRELOAD=$SHIM $APP "$@"
    else
        env POS_APP="$name" $APP "$@"
    fi
}
# bg OUTFILE NAME SHIMMED ARGS... : the same in the background; BG is its pid (posapp's own,
# so that kill reaches it)
bg() {
    local out=$1 name=$2 shimmed=$3
    shift 3
    if [ "$shimmed" = 1 ]; then
        env POS_APP="$name" LD_PRELOAD=$SHIM $APP "$@" >"$out" &
    else
        env POS_APP="$name" $APP "$@" >"$out" &
    fi
    BG=$!
}

# ---- 1. a batch client alone ----------------------------------------------------------------
echo "bench: batch alone x $REPS..." >&2
declare -A alone
for m in resnet50 mobilenet_v1; do
    n=100
    [ $m = mobilenet_v1 ] && n=400
    for ((r = 0; r < REPS; r++)); do
        inst alone-$m-$r
        alone[$m,plain]+="$(field "$(app batch1 0 --model $m --requests $n)" throughput_rps) "
        posd_up priority
        alone[$m,posd]+="$(field "$(app batch1 1 --model $m --requests $n)" throughput_rps) "
        posd_down
    done
done

# ---- 2. beside a sparse latency client ------------------------------------------------------
# sparse MODE BATCH_MODEL -> "batch_rps lat_p50 lat_p99"
LAT_SPARSE=(--model resnet18 --arrival poisson:5 --requests 30)
sparse() {
    local mode=$1 bm=$2 shimmed=0 n=250
    [ "$bm" = mobilenet_v1 ] && n=1000
    inst sparse-$mode-$bm-$RANDOM
    [ "$mode" = priority ] && { posd_up priority; shimmed=1; }
    bg "$T/l.json" latency1 $shimmed "${LAT_SPARSE[@]}"
    local l=$BG
    sleep 0.3
    app batch1 $shimmed --model "$bm" --requests $n >"$T/b.json" || true
    wait $l || true
    if [ "$mode" = priority ]; then posd_down; fi
    local lj bj
    lj=$(cat "$T/l.json") bj=$(cat "$T/b.json")
    echo "$(field "$bj" throughput_rps) $(field "$lj" p50_ms) $(field "$lj" p99_ms)"
}
# the latency client's own figures and posd's, on one run under posd
sparse_posd_view() {
    inst sparse-view-$RANDOM
    posd_up priority
    bg "$T/l.json" latency1 1 "${LAT_SPARSE[@]}"
    local l=$BG
    sleep 0.3
    bg /dev/null batch1 1 --model resnet50 --requests 250
    local b=$BG
    sleep 4
    local js
    js=$($POSSTAT -o json)
    wait $l $b || true
    posd_down
    local lj
    lj=$(cat "$T/l.json")
    echo "$(field "$lj" p50_ms) $(field "$lj" p99_ms) $(cfield "$js" latency1 req_p50_ms)" \
        "$(cfield "$js" latency1 req_p99_ms) $(cfield "$js" latency1 sync_lag_p50_us)" \
        "$(cfield "$js" latency1 sync_lag_p99_us) $(cfield "$js" latency1 requests_per_s)"
}
echo "bench: sparse latency x $REPS..." >&2
declare -A sp
for ((r = 0; r < REPS; r++)); do
    inst sparse-solo-$r
    j=$(app latency1 0 "${LAT_SPARSE[@]}")
    sp[solo,p50]+="$(field "$j" p50_ms) " sp[solo,p99]+="$(field "$j" p99_ms) "
    for bm in resnet50 mobilenet_v1; do
        n=250
        [ $bm = mobilenet_v1 ] && n=1000
        inst sparse-bsolo-$bm-$r
        sp[$bm,bsolo]+="$(field "$(app batch1 0 --model $bm --requests $n)" throughput_rps) "
        for mode in none priority; do
            read -r a b c <<<"$(sparse $mode $bm)"
            sp[$bm,$mode,b]+="$a " sp[$bm,$mode,p50]+="$b " sp[$bm,$mode,p99]+="$c "
        done
    done
    read -r a b c d e f g <<<"$(sparse_posd_view)"
    sp[view,app50]+="$a " sp[view,app99]+="$b " sp[view,posd50]+="$c " sp[view,posd99]+="$d "
    sp[view,lag50]+="$e " sp[view,lag99]+="$f " sp[view,rps]+="$g "
done

# ---- 3. the isolation case ------------------------------------------------------------------
echo "bench: isolation x $REPS..." >&2
LAT_ISO=(--model resnet50 --requests 200)
declare -A iso
for ((r = 0; r < REPS; r++)); do
    inst iso-solo-$r
    j=$(app latency1 0 "${LAT_ISO[@]}")
    iso[solo,p99]+="$(field "$j" p99_ms) " iso[solo,p50]+="$(field "$j" p50_ms) "
    inst iso-$r
    posd_up priority
    bg /dev/null batch1 1 --model resnet50 --requests 1000000
    b1=$BG
    bg /dev/null batch2 1 --model resnet50 --requests 1000000
    b2=$BG
    sleep 0.5
    s0=$($POSSTAT -o json) t0=$(date +%s.%N)
    bg "$T/l.json" latency1 1 "${LAT_ISO[@]}"
    l=$BG
    sleep 2
    js=$($POSSTAT -o json)
    wait $l || true
    s1=$($POSSTAT -o json) t1=$(date +%s.%N)
    j=$(cat "$T/l.json")
    kill $b1 $b2
    wait $b1 $b2 2>/dev/null || true
    posd_down
    iso[prio,p99]+="$(field "$j" p99_ms) " iso[prio,p50]+="$(field "$j" p50_ms) "
    # the batch clients' launches while the latency client ran (posstat's launches/s over a
    # client's registration times its span is its launch count)
    bt=$(awk -v a0="$(launched "$s0" batch1)" -v b0="$(launched "$s0" batch2)" \
        -v a1="$(launched "$s1" batch1)" -v b1="$(launched "$s1" batch2)" -v t0="$t0" -v t1="$t1" \
        'BEGIN {printf "%.0f", (a1 + b1 - a0 - b0) / (t1 - t0)}')
    iso[prio,bt]+="$bt "
    iso[prio,lag99]+="$(cfield "$js" latency1 sync_lag_p99_us) "
done

# ---- 4. a latency client stopped by a signal with work in flight -----------------------------
echo "bench: stopped client x $REPS..." >&2
stops=""
for ((r = 0; r < REPS; r++)); do
    inst stop-$r
    posd_up priority
    bg /dev/null latency1 1 --model resnet50 --requests 1000000
    l=$BG
    sleep 0.3
    bg /dev/null batch1 1 --model resnet18 --requests 1000000
    b=$BG
    sleep 1
    t0=$(date +%s%N)
    kill -STOP $l
    while :; do
        js=$($POSSTAT -o json)
        [ "$(cfield "$js" batch1 held)" = false ] && break
        [ $(($(date +%s%N) - t0)) -gt 5000000000 ] && break
    done
    t1=$(date +%s%N)
    stops+="$(awk -v d=$((t1 - t0)) 'BEGIN {printf "%.0f", d / 1e6}') "
    kill -CONT $l
    kill $l $b
    wait $l $b 2>/dev/null || true
    posd_down
done

# ---- 5. grant latency and the capped launch path --------------------------------------------
# waits LAUNCHTIMES SIMTRACE -> "wait_p50 wait_p99 lag_p50 lag_p99 after_p50 after_p99" (us):
# each launch's wait (call to return; the first has nothing before it and is left out), the
# device's lag in making the kernel before it visible to the host, and the wait from that
# visibility (or the call, if later) to the launch's return
waits() {
    python3 - "$1" "$2" <<'PY'
import sys
lt = [tuple(map(int, l.split())) for l in open(sys.argv[1])]
k = [l.split() for l in open(sys.argv[2]) if l.startswith('kernel')]
end, seen = [int(x[2]) for x in k], [int(x[3]) for x in k]
n = min(len(lt), len(end))
q = lambda a, p: sorted(a)[min(len(a) - 1, max(0, -(-len(a) * p // 100) - 1))]
wait = [(lt[i][1] - lt[i][0]) / 1e3 for i in range(1, n)]
lag = [(seen[i] - end[i]) / 1e3 for i in range(n - 1)]
after = [(lt[i][1] - max(lt[i][0], seen[i - 1])) / 1e3 for i in range(1, n)]
print(" ".join("%.1f" % q(a, p) for a in (wait, lag, after) for p in (50, 99)))
PY
}
echo "bench: grant latency x $REPS..." >&2
declare -A gr
for ((r = 0; r < REPS; r++)); do
    inst grant-$r
    posd_up priority
    bg /dev/null latency1 1 --model resnet18 --arrival poisson:0.2 --requests 3
    l=$BG
    sleep 0.3
    # max_inflight 1: every launch waits for the previous one's completion (the simulated
    # device's trace says when that kernel ended and when the host could see it)
    POS_SIM_TRACE=$T/c.sim bg "$T/c.json" capped1 1 --microbench 10000 --launch-times "$T/c.lt"
    c=$BG
    sleep 0.2
    js=$($POSSTAT -o json)
    wait $c || true
    gr[cap1,p50]+="$(cfield "$js" capped1 wait_p50_us) " gr[cap1,p99]+="$(cfield "$js" capped1 wait_p99_us) "
    read -r w50 w99 v50 v99 a50 a99 <<<"$(waits "$T/c.lt" "$T/c.sim")"
    gr[cap1,w50]+="$w50 " gr[cap1,w99]+="$w99 " gr[cap1,v50]+="$v50 " gr[cap1,v99]+="$v99 "
    gr[cap1,a50]+="$a50 " gr[cap1,a99]+="$a99 "
    gr[cap1,ms]+="$(field "$(cat "$T/c.json")" makespan_s) "
    # a wide window (256 in flight): the cost of a launch while the window is not full
    j=$(app wide1 1 --microbench 3000)
    gr[wide,launch]+="$(field "$j" launch_ns_p50) " gr[wide,ms]+="$(field "$j" makespan_s) "
    kill $l 2>/dev/null || true
    wait $l 2>/dev/null || true
    posd_down
    inst grant-plain-$r
    j=$(app plain1 0 --microbench 3000)
    gr[plain,launch]+="$(field "$j" launch_ns_p50) " gr[plain,ms]+="$(field "$j" makespan_s) "
    j=$(POS_MODE=passthrough app pass1 1 --microbench 3000)
    gr[pass,launch]+="$(field "$j" launch_ns_p50) "
done

# ---- report ---------------------------------------------------------------------------------
r50p=$(med "${alone[resnet50,plain]}") r50s=$(med "${alone[resnet50,posd]}")
mbp=$(med "${alone[mobilenet_v1,plain]}") mbs=$(med "${alone[mobilenet_v1,posd]}")
solo99=$(med "${sp[solo,p99]}") solo50=$(med "${sp[solo,p50]}")
row_sparse() { # batch model
    local bs b0 bp l0 lp
    bs=$(med "${sp[$1,bsolo]}") b0=$(med "${sp[$1,none,b]}") bp=$(med "${sp[$1,priority,b]}")
    l0=$(med "${sp[$1,none,p99]}") lp=$(med "${sp[$1,priority,p99]}")
    echo "| $1 | $bs | $b0 ($(ratio "$b0" "$bs")) | **$bp ($(ratio "$bp" "$bs"))** | $l0 ($(ratio "$l0" "$solo99")) | **$lp ($(ratio "$lp" "$solo99"))** |"
}
isolo=$(med "${iso[solo,p99]}") iprio=$(med "${iso[prio,p99]}")
cpu=$(sed -n 's/^model name[ \t]*: //p' /proc/cpuinfo | head -1)
cat >"$OUT" <<EOF
# Scheduling core: work conservation, completion and grant latency

**Simulated GPU.** Produced by \`bash bench/core.sh\` (or \`make bench\`) on $(date -u +%Y-%m-%d),
$(nproc) cores ($cpu), kernel $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown).
Real processes: posd (policy priority; \`POS_APP=batch*\` matched to class batch) and posapp
under \`libposshim.so\` on the simulated driver (xavier-nx preset, timeslice mode). "plain" is
the same command without shim or posd. Medians of $REPS alternating runs; throughput in
requests/s as posapp reports it.

## A batch client alone

| model | plain | under posd (batch class) | ratio |
|---|---|---|---|
| resnet50 (100 requests) | $r50p | $r50s | **$(ratio "$r50s" "$r50p")** |
| mobilenet_v1 (400 requests) | $mbp | $mbs | **$(ratio "$mbs" "$mbp")** |

Target: at least 0.95. Nobody outranks it, so it launches freely (no launch waits for a
grant; \`tests/integration/test_posd.c\` checks that).

## Beside a sparse latency client

Latency client: \`posapp ${LAT_SPARSE[*]}\` (about 3% of the GPU), started first; the batch
client (closed loop, resnet50 250 requests or mobilenet_v1 1000) starts 0.3 s later. Solo:
each alone, plain (latency p50 $solo50 ms, p99 **$solo99 ms**). "none" is both plain at once
(no scheduler, the GPU time-slices them). Ratios against solo.

| batch model | batch solo (req/s) | batch, none | batch, priority | latency p99 ms, none | latency p99 ms, priority |
|---|---|---|---|---|---|
$(row_sparse resnet50)
$(row_sparse mobilenet_v1)

Targets: batch at least 0.90 x solo and latency p99 at most 1.10 x solo, under priority.
While the latency client is idle the batch client runs in a window of about \`window_us\`
(500 us) of GPU time by posd's estimate of its operators (at least two); while the latency
client has work, the batch client is held.

## The isolation case

A latency \`posapp ${LAT_ISO[*]}\` (closed loop) beside two batch resnet50 closed loops under
priority. Latency p50 $(med "${iso[prio,p50]}") ms, p99 **$iprio ms** against solo p99 $isolo ms:
**$(ratio "$iprio" "$isolo") x** (target at most 1.10). Batch throughput, both clients, while
the latency client ran: $(med "${iso[prio,bt]}") launches/s (posstat's counts before and
after; runs: ${iso[prio,bt]}). They are held, and get their time from the starvation guard (\`min_share\` 1% of each 200 ms
period) and from the gaps between the latency client's requests. Runs, latency p99: solo
${iso[solo,p99]}| priority ${iso[prio,p99]}ms.

## A latency client stopped with work in flight

A latency resnet50 closed loop and a batch resnet18 closed loop under priority; after 1 s the
latency client gets SIGSTOP (mid-request). Time until posstat shows the batch client no
longer held: **$(med "$stops") ms** median (runs: ${stops}ms). The bound is \`stall_ms\` (50 ms
by default: work in flight with no completion for that long no longer outranks anyone) plus
posd's next decision and posstat's own polling (each posstat run costs a few ms). What a
client writes about itself (its waiter count) is believed only while it has work queued.

## How soon posd knows a request ended

On one sparse run under posd (latency resnet18 poisson:5 beside a batch resnet50), from
posstat 4 s in: the latency client's synchronisations reached posd **$(med "${sp[view,lag50]}") us
p50, $(med "${sp[view,lag99]}") us p99** after the application's \`cuEventSynchronize\`
returned (targets 50 / 200 us; runs p99: ${sp[view,lag99]}us). In the isolation case the p99
was $(med "${iso[prio,lag99]}") us. A sync report is written by the thread that synchronised
and kicks posd at once (one eventfd write per synchronisation).

Requests as posd infers them (the first launch after a synchronisation that covered
everything starts one; the synchronisation after which nothing is queued or in flight ends
it), against posapp's own figures on the same run:

| | posapp | posd | posd / posapp |
|---|---|---|---|
| latency p50 (ms) | $(med "${sp[view,app50]}") | $(med "${sp[view,posd50]}") | $(ratio "$(med "${sp[view,posd50]}")" "$(med "${sp[view,app50]}")") |
| latency p99 (ms) | $(med "${sp[view,app99]}") | $(med "${sp[view,posd99]}") | $(ratio "$(med "${sp[view,posd99]}")" "$(med "${sp[view,app99]}")") |

Target: within 10%. posd's quantiles come from a histogram with 16 buckets per power of
two (about 3% wide). posapp measures an open-loop request from its scheduled arrival, posd
from its first launch: they differ by the client's own queueing, which is small at 5
requests/s.

## Grant latency, real clients

A batch posapp beside an idle latency client (so it runs in a window):
- \`max_inflight 1\`: every launch of \`posapp --microbench 10000\` waits until the previous one
  is known complete. Its operators are so short that the waiting thread spins and does the
  collector's pass itself (every 2 us, yielding the core in between; a client whose waits
  average 60 us or more sleeps instead): it sees the previous kernel's completion marker land,
  steps the window cap posd set (no round trip through posd) and goes. Client-side wait,
  each launch's call to return as posapp times it: **p50 $(med "${gr[cap1,w50]}") us, p99
  $(med "${gr[cap1,w99]}") us** (targets p50 50 us, p99 200 us; runs p50 ${gr[cap1,w50]}, p99
  ${gr[cap1,w99]}). It includes the simulated tiny kernel (6 us) and the simulated device's
  own lag in making its end visible to the host (its agent thread wakes on a timer):
  $(med "${gr[cap1,v50]}") us p50, $(med "${gr[cap1,v99]}") us p99 by \`POS_SIM_TRACE\` (a GPU
  writes a marker within a few us). From that visibility to the launch's return (pos's wait,
  then the launch call itself): $(med "${gr[cap1,a50]}") us p50, $(med "${gr[cap1,a99]}") us p99 (runs p99
  ${gr[cap1,a99]}). posstat's histogram of the time inside the shim's wait alone (the rest of
  each launch's time is the launch itself into the simulated driver, whose device has just gone
  idle): p50 $(med "${gr[cap1,p50]}") us, p99
  $(med "${gr[cap1,p99]}") us (a value v means [v/2, v) us).
- per-launch cost while the window is not full (\`max_inflight 256\`): median launch
  $(med "${gr[wide,launch]}") ns against $(med "${gr[pass,launch]}") ns with the shim in
  passthrough: **$(ratio "$(med "${gr[wide,launch]}")" "$(med "${gr[pass,launch]}")") x**
  (target at most 2 x; without the shim $(med "${gr[plain,launch]}") ns). Runs:
  ${gr[wide,launch]}/ ${gr[pass,launch]}ns. Makespan of the 3000 launches: wide window $(med "${gr[wide,ms]}") s,
  plain $(med "${gr[plain,ms]}") s; of the 10000 at \`max_inflight 1\`: $(med "${gr[cap1,ms]}") s.
EOF
echo "bench: wrote $OUT" >&2
