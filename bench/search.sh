#!/usr/bin/env bash
# Static schedule search (simulated GPU, virtual time): for POS's six mixes at batch 1 on the
# rtx3080 and h200 presets (MPS), `possim search` by sequential, greedy and DP (predicted time
# of one round of the mix, speedup over sequential, search CPU time); then possim runs the
# searched schedules end to end (policy staged) beside fifo and the sequential schedule; and
# on a small mix the pruned searches against the unpruned DP. Writes docs/results/search.md.
#
#   bash bench/search.sh                  (make bench-search runs it)
#   REQ=50 UNITS=16 MAXRUN=8 OUT=/tmp/s.md bash bench/search.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results/search.md}
REQ=${REQ:-50}        # requests per client in the end-to-end runs
UNITS=${UNITS:-16}    # coarsening of the main searches
MAXRUN=${MAXRUN:-8}   # units per model per stage of several models
DEVICES=${DEVICES:-rtx3080 h200}
POSSIM=build/possim
[ -x $POSSIM ] || { echo "bench-search: build first (make)" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
start=$(date +%s)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- . ':!docs' 2>/dev/null || commit="$commit (with uncommitted changes)"

declare -A NAME=([R18]=resnet18 [R34]=resnet34 [R50]=resnet50 [Iv1]=inception_v1
    [Iv2]=inception_v2 [Iv3]=inception_v3 [Mv1]=mobilenet_v1 [Mv2]=mobilenet_v2
    [Mv3]=mobilenet_v3)
MIXES="R18+R34+R50 Iv1+Iv2+Iv3 Mv1+Mv2+Mv3 R18+Iv1+Mv1 R34+Iv2+Mv2 R50+Iv3+Mv3"

scenario() { # file preset policy schedule models...
    local f=$1 dev=$2 pol=$3 sched=$4
    shift 4
    {
        printf '[device]\npreset = %s\nmode = mps\n[sched]\npolicy = %s\n' "$dev" "$pol"
        [ -n "$sched" ] && printf 'schedule = %s\n' "$sched"
        for m in "$@"; do printf '[client %s]\nmodel = %s\nrequests = %s\n' "$m" "$m" "$REQ"; done
    } >"$f"
}
models_of() { local m out=(); for m in ${1//+/ }; do out+=("${NAME[$m]}"); done; echo "${out[@]}"; }
# a row of `possim search` output: field N (2 stages, 3 round_us, 4 speedup, 5 evals, 6 sims,
# 7 states, 8 pruned, 9 misses, 10 cpu_s)
row() { awk -v m="$2" -v n="$3" '$1 == m {print $n}' "$1"; }
# possim's virtual time per round: makespan / requests (every client runs REQ requests)
per_round_us() { awk -v r="$REQ" '/^# makespan_s/ {printf "%.1f", $3 / r * 1e6}' "$1"; }
# ... and under staged, the longest of the clients' median request latencies: in lock step a
# closed-loop client's request spans one round (the first rounds, which identify the mix, run
# free and would flatter an average)
lockstep_us() { awk '!/^#/ && NF > 8 {v = $7 * 1000; if (v > m) m = v} END {printf "%.1f", m}' "$1"; }
busy() { awk '/^# makespan_s/ {print $5}' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b == 0 || a == "" || b == "") print "-"; else printf "%.3f", a / b}'; }
note_rounds() { sed -n 's/.*; \([0-9]*\) rounds followed.*/\1/p; s/.*following the schedule.*/all/p' "$1" | head -1; }

search_tab=$T/search.md
e2e_tab=$T/e2e.md
max_cpu=0
for dev in $DEVICES; do
    for mix in $MIXES; do
        id=$dev-${mix//+/_}
        models=$(models_of "$mix")
        # shellcheck disable=SC2086
        scenario "$T/$id.ini" "$dev" fifo "" $models
        $POSSIM search --units "$UNITS" --max-run "$MAXRUN" -w "$T/$id.dp.sched" "$T/$id.ini" \
            >"$T/$id.search"
        $POSSIM search -m sequential -w "$T/$id.seq.sched" "$T/$id.ini" >/dev/null
        s=$T/$id.search
        seq=$(row "$s" sequential 3) gr=$(row "$s" greedy 3) dp=$(row "$s" dp 3)
        cpu=$(row "$s" dp 10)
        max_cpu=$(awk -v a="$max_cpu" -v b="$cpu" 'BEGIN {print (b > a ? b : a)}')
        echo "| $dev | $mix | $seq | $gr ($(row "$s" greedy 4)x, $(row "$s" greedy 2) st) | **$dp ($(row "$s" dp 4)x, $(row "$s" dp 2) st)** | $(row "$s" greedy 10) | $cpu | $(row "$s" dp 6) | $(row "$s" dp 7) | $(row "$s" dp 9) |" >>"$search_tab"
        # end to end: fifo, the sequential schedule, the DP schedule, and the DP schedule
        # searched again with the barrier the first end-to-end run measured
        # shellcheck disable=SC2086
        scenario "$T/$id.fifo.ini" "$dev" fifo "" $models
        # shellcheck disable=SC2086
        scenario "$T/$id.seq.ini" "$dev" staged "$T/$id.seq.sched" $models
        # shellcheck disable=SC2086
        scenario "$T/$id.dp.ini" "$dev" staged "$T/$id.dp.sched" $models
        for k in fifo seq dp; do $POSSIM "$T/$id.$k.ini" >"$T/$id.$k.out"; done
        stages=$(row "$s" dp 2)
        barrier=$(awk -v m="$(lockstep_us "$T/$id.dp.out")" -v p="$dp" -v k="$stages" \
            'BEGIN {b = (m - p) / k; printf "%.1f", (b > 0 ? b : 0)}')
        $POSSIM search --units "$UNITS" --max-run "$MAXRUN" -m dp --barrier-us "$barrier" \
            -w "$T/$id.dpb.sched" "$T/$id.ini" >"$T/$id.searchb"
        # shellcheck disable=SC2086
        scenario "$T/$id.dpb.ini" "$dev" staged "$T/$id.dpb.sched" $models
        $POSSIM "$T/$id.dpb.ini" >"$T/$id.dpb.out"
        f=$(per_round_us "$T/$id.fifo.out") q=$(lockstep_us "$T/$id.seq.out")
        d=$(lockstep_us "$T/$id.dp.out") b=$(lockstep_us "$T/$id.dpb.out")
        pb=$(row "$T/$id.searchb" dp 3)
        echo "$(ratio "$q" "$b") $(ratio "$f" "$b") $(ratio "$b" "$pb") $barrier $(row "$s" dp 4) $(ratio "$b" "$f")" >>"$T/summary"
        echo "| $dev | $mix | $q | $f ($(busy "$T/$id.fifo.out")) | $dp | $d ($(ratio "$d" "$dp")) | $barrier | $pb, $(row "$T/$id.searchb" dp 2) st | $b ($(ratio "$b" "$pb")) | $(ratio "$q" "$b") | $(ratio "$f" "$b") | $(note_rounds "$T/$id.dpb.out") |" >>"$e2e_tab"
    done
done

# the same with real processes: posd (policy staged, [policy] schedule = the DP + barrier
# schedule; or fifo) and three posapp clients under libposshim.so on the simulated driver
REAL_REQ=${REAL_REQ:-200}
REAL_REPS=${REAL_REPS:-3}
real_tab=$T/real.md
POSD_PID=
stop_posd() { [ -n "$POSD_PID" ] && kill "$POSD_PID" 2>/dev/null && wait "$POSD_PID" 2>/dev/null; POSD_PID=; }
trap 'stop_posd; rm -rf "$T"' EXIT
med() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
jf() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
real_run() { # dev policy schedule tag -> prints "round_us rounds"
    local dev=$1 pol=$2 sched=$3 tag=$4 m
    export POS_SOCKET=$T/posd.sock POS_SIM_DEVICE=$dev POS_SIM_MODE=mps POS_SIM_INSTANCE=bench-search-$$
    printf '[daemon]\nsocket = %s\n' "$POS_SOCKET" >"$T/posd.conf"
    [ -n "$sched" ] && printf '[policy]\nschedule = %s\n' "$sched" >>"$T/posd.conf"
    rm -f "$POS_SOCKET"
    build/posd -f -c "$T/posd.conf" -p "$pol" >"$T/$tag.posd.log" 2>&1 &
    POSD_PID=$!
    for _ in $(seq 150); do [ -S "$POS_SOCKET" ] && break; sleep 0.02; done
    local pids=()
    for m in resnet18 resnet34 resnet50; do
        POS_APP=$m LD_LIBRARY_PATH=build/sim LD_PRELOAD=build/libposshim.so build/posapp \
            --model $m --requests "$REAL_REQ" >"$T/$tag.$m.json" &
        pids+=($!)
    done
    wait "${pids[@]}"
    stop_posd
    local r
    if [ "$pol" = staged ]; then
        r=$(for m in resnet18 resnet34 resnet50; do jf "$T/$tag.$m.json" p50_ms; done | sort -g | tail -1)
    else
        r=$(for m in resnet18 resnet34 resnet50; do jf "$T/$tag.$m.json" makespan_s; done | sort -g | tail -1)
        r=$(awk -v x="$r" -v n="$REAL_REQ" 'BEGIN {print x / n * 1000}')
    fi
    awk -v x="$r" 'BEGIN {printf "%.1f", x * 1000}'
    echo " $(sed -n 's/.*; \([0-9]*\) rounds followed.*/\1/p' "$T/$tag.posd.log" | tail -1)"
}
for dev in $DEVICES; do
    id=$dev-R18_R34_R50
    fr=() sr=() rounds=()
    for rep in $(seq "$REAL_REPS"); do
        read -r a _ < <(real_run "$dev" fifo "" "$id.fifo.$rep")
        read -r b c < <(real_run "$dev" staged "$T/$id.dpb.sched" "$id.staged.$rep")
        fr+=("$a") sr+=("$b") rounds+=("${c:--}")
    done
    f=$(printf '%s\n' "${fr[@]}" | med) st=$(printf '%s\n' "${sr[@]}" | med)
    echo "| $dev | R18+R34+R50 | $f (${fr[*]}) | $st (${sr[*]}) | $(ratio "$st" "$(lockstep_us "$T/$id.dpb.out")") | $(ratio "$f" "$st") | ${rounds[*]} |" >>"$real_tab"
done
unset POS_SOCKET POS_SIM_DEVICE POS_SIM_MODE POS_SIM_INSTANCE

# pruning against the unpruned DP on a small mix: the first 8 operators of R18, R34 and R50
mkdir -p "$T/models"
for m in resnet18 resnet34 resnet50; do
    awk -v n="small_$m" '/^model / {print "model " n; next} /^op / {if (++k > 8) next} {print}' \
        "sim/models/$m.model" >"$T/models/small_$m.model"
done
export POS_MODELS_DIR=$T/models
prune_tab=$T/prune.md
for dev in $DEVICES; do
    scenario "$T/small-$dev.ini" "$dev" fifo "" small_resnet18 small_resnet34 small_resnet50
    $POSSIM search -m dp --max-run 0 --no-bound "$T/small-$dev.ini" >"$T/small-$dev.exact"
    exact=$(row "$T/small-$dev.exact" dp 3) ecpu=$(row "$T/small-$dev.exact" dp 10)
    echo "| $dev | unpruned: units 0, max_run 0, no bound | $exact | 1.000 | $(row "$T/small-$dev.exact" dp 5) | $ecpu |" >>"$prune_tab"
    for v in "--max-run 0|bound only" "--max-run 4|max_run 4" "--max-run 2|max_run 2" \
        "--max-run 1|max_run 1" "--units 4 --max-run 0|units 4" "--units 4 --max-run 2|units 4, max_run 2"; do
        opts=${v%%|*} label=${v#*|}
        # shellcheck disable=SC2086
        $POSSIM search -m dp $opts "$T/small-$dev.ini" >"$T/small-$dev.v"
        r=$(row "$T/small-$dev.v" dp 3)
        echo "| $dev | $label | $r | $(ratio "$r" "$exact") | $(row "$T/small-$dev.v" dp 5) | $(row "$T/small-$dev.v" dp 10) |" >>"$prune_tab"
    done
    $POSSIM search -m greedy --max-run 4 "$T/small-$dev.ini" >"$T/small-$dev.g"
    g=$(row "$T/small-$dev.g" greedy 3)
    echo "| $dev | greedy, max_run 4 | $g | $(ratio "$g" "$exact") | $(row "$T/small-$dev.g" greedy 5) | $(row "$T/small-$dev.g" greedy 10) |" >>"$prune_tab"
done
unset POS_MODELS_DIR

# the main searches' limits against finer ones on one full mix
fine_tab=$T/fine.md
for v in "--units $UNITS --max-run $MAXRUN|units $UNITS, max_run $MAXRUN (the tables above)" \
    "--units 32 --max-run 8|units 32, max_run 8" "--units 0 --max-run 4|units 0 (every operator), max_run 4"; do
    opts=${v%%|*} label=${v#*|}
    # shellcheck disable=SC2086
    $POSSIM search -m dp $opts "$T/rtx3080-R18_R34_R50.ini" >"$T/fine.v"
    echo "| $label | $(row "$T/fine.v" dp 3) | $(row "$T/fine.v" dp 2) | $(row "$T/fine.v" dp 5) | $(row "$T/fine.v" dp 10) |" >>"$fine_tab"
done

cpu=$(sed -n 's/^model name[ \t]*: //p' /proc/cpuinfo | head -1)
faster=$(awk -v c="$max_cpu" 'BEGIN {printf "%.0f", 110 / (c > 0 ? c : 1e-3)}')
beats=$(awk '$6 < 1' "$T/summary" | wc -l)
range() { awk -v k="$1" '{v = $k; if (NR == 1 || v < lo) lo = v; if (NR == 1 || v > hi) hi = v} END {printf "%s-%s", lo, hi}' "$T/summary"; }
cat >"$OUT" <<EOF
# Static schedule search

**Simulated GPU, virtual time.** Produced by \`bash bench/search.sh\` (or \`make bench-search\`)
on $(date -u +%Y-%m-%d), $(nproc) cores ($cpu), kernel $(uname -r), commit $commit, in
$(($(date +%s) - start)) s. Every figure is possim's on the virtual-GPU model
(\`sim/gpu_model.c\`): nothing here ran on a GPU. Format and method: [schedule.md](../schedule.md).

Mixes: POS's (IPSN'23) six at batch 1, each model one client, on the \`rtx3080\` and \`h200\`
presets in MPS mode. A *round* is one request of every model of the mix.

**In short** (this run): the DP predicts a round $(range 5)x faster than running the models one
at a time; followed end to end by policy \`staged\` (after a second search that knows the
barrier's cost, $(range 4) µs per stage), the schedules run $(range 3)x their prediction and
$(range 1)x faster than the sequential schedule. Against the models running free under MPS
(\`fifo\`, no scheduling), the followed schedules take $(range 6)x fifo's time per round
(faster than fifo on $beats of $(wc -l <"$T/summary") mix and device pairs): fifo's free
overlap is already about as good as the best stage schedule the search finds, and each stage
barrier costs about what the search saves. The slowest search took $max_cpu CPU s, about
${faster}x less than POS's 110 s.

## Search: predicted time of one round, and search time

\`possim search --units $UNITS --max-run $MAXRUN -w FILE SCENARIO\` (scenario: the three
clients of the mix, \`[device] preset = DEV, mode = mps\`). Times in µs of virtual time per
round, as the search predicts it (the sum of its stages' costs, each stage measured on the
device model); speedup over sequential and stages in brackets; CPU seconds of each search on
this machine (each method on a fresh stage cache). *sims*: stage simulations of the DP;
*states*: progress vectors it reached; *misses*: stages that came in under their lower bound
(see below).

| device | mix | sequential | greedy | DP | greedy cpu_s | DP cpu_s | DP sims | DP states | misses |
|---|---|---|---|---|---|---|---|---|---|
$(cat "$search_tab")

POS reports 110-160 s of search (MEOS) on an RTX 3080 (and 190-365 s for its other
searches). The slowest DP here took $max_cpu CPU s, about ${faster}x less than POS's fastest,
on a loaded 2-core VM: not the same search space (POS also chooses fusion, reuse and kernels; this
search only stages the models' kernels) nor the same cost measurement (a device model, not a GPU).

## End to end in possim: the searched schedules followed by policy \`staged\`

Each mix as three closed-loop clients of $REQ requests (\`[sched] policy = staged\`,
\`schedule = FILE\`; fifo: \`policy = fifo\`, no schedule). Time per round = possim's makespan /
$REQ for fifo (every client runs $REQ requests; the models run free, the faster ones finishing
early); under staged the clients run in lock step, one request each per round, and the time per
round is the longest of the clients' median request latencies (a closed-loop client's request
spans one round; the first rounds, which identify the mix, run free and are left out so). *barrier*: the
measured cost of one stage barrier, (DP measured − DP predicted) / DP stages; *DP + barrier*:
the DP searched again with \`--barrier-us\` set to it (fewer stages win), followed end to end.
*rounds*: rounds the follower ran the schedule (out of $REQ; the first ones identify the mix).

| device | mix | sequential schedule | fifo (busy) | DP predicted | DP measured (/ predicted) | barrier µs | DP + barrier predicted | measured (/ predicted) | speedup over sequential | over fifo | rounds |
|---|---|---|---|---|---|---|---|---|---|---|---|
$(cat "$e2e_tab")

With real processes (posd, libposshim.so and posapp on the simulated driver, \`POS_SIM_DEVICE=DEV
POS_SIM_MODE=mps\`), R18+R34+R50, $REAL_REQ requests per client, median of $REAL_REPS runs (each
listed): fifo's time per round is the slowest client's makespan / $REAL_REQ; staged's (the
*DP + barrier* schedule above) the longest median request latency; *rounds*: rounds posd's
follower ran, from its log. The real system's per-completion lag (the simulated driver's agent
thread, see [possim.md](../possim.md)) is not in possim's figures, so the ratio to possim is above 1.

| device | mix | fifo µs per round | staged µs per round | / possim | fifo / staged | rounds |
|---|---|---|---|---|---|---|
$(cat "$real_tab")

Commands per cell: the scenario with \`policy = fifo\`, or \`policy = staged\` and
\`schedule = \` the file \`possim search -m sequential -w\`, \`possim search ... -w\` or
\`possim search ... -m dp --barrier-us B -w\` wrote; \`build/possim SCENARIO\`.

## Pruning: what it costs on a small mix

The first 8 operators of resnet18, resnet34 and resnet50 (three 8-operator chains: 729
progress states, small enough for the unpruned DP). Unpruned: every stage of any runs,
no bound pruning. Predicted µs per round; ratio to the unpruned optimum; stage evaluations
(cache lookups) and CPU s.

| device | search | round µs | / unpruned | evals | cpu_s |
|---|---|---|---|---|---|
$(cat "$prune_tab")

And the main tables' limits against finer searches on one full mix (R18+R34+R50, rtx3080):

| search | round µs | stages | evals | cpu_s |
|---|---|---|---|---|
$(cat "$fine_tab")

**How it prunes, and what that costs.**
- *max_run* caps the units one model runs in a stage shared with other models (stages of one
  model alone stay any length, so the sequential schedule stays reachable and the DP never
  does worse than it): a stage from a progress vector is one of (max_run+1)^3 run vectors instead of
  the product of every model's remaining operators.
- *units* coarsens each model to at most N units of about equal solo time (consecutive
  operators), so a run is counted in units: fewer states, but a run can only end on a unit
  boundary.
- *bounds*: a stage costs at least its longest run alone, and what is left at least the
  longest remainder alone (a stream's kernels run one after another, so a run alone is the
  sum of its units alone); a stage whose bound already cannot beat the best way to its target,
  or the sequential schedule overall, is not simulated. Exact if co-running never makes a run
  faster than alone. The device model does not quite promise that: *misses* counts stages that
  came in under their bound (measured: inception_v3's first 11 operators take 201.8 µs alone
  on rtx3080 and 183.7 µs beside mobilenet_v3's first 8), where the pruning may have cut the
  optimum; \`--no-bound\` searches without it.
EOF
echo "bench-search: wrote $OUT"
