#!/usr/bin/env bash
# Whether a process of the simulated GPU that the host does not run changes the other
# processes' request latency (simulated). Issue 18's target: a process stopped (SIGSTOP) at
# any point, inside the driver included, or running at SCHED_IDLE beside busy loops, changes
# no other process's request p99 by more than 5%.
#
# Three measured clients share one virtual GPU (xavier-nx, timeslice): two posapp resnet18
# closed loops and one at Poisson arrivals. Beside them runs one extra client,
# build/bench/simisolation (short kernels at Poisson arrivals, polling cuStreamQuery until
# each is done, so it is inside driver calls most of the time), in four configurations, each
# run side by side with its baseline and alternating with it over ROUNDS rounds:
#   a   the extra client runs undisturbed                                (baseline of b)
#   b   the extra client is stopped (SIGSTOP) for 50-150 ms at random moments throughout,
#       20-200 ms apart
#   c0  nproc busy loops at normal priority, no extra client             (baseline of c)
#   c   the same busy loops and the extra client at SCHED_IDLE (chrt -a -i -p 0, once it is
#       attached)
# The extra client issues the arrivals it missed while it did not run as soon as it runs
# again, so its work on the device over a run is the same in a and b. Writes
# docs/results/simisolation.md: per measured client and configuration the median p99 (and
# p50) over the rounds, their range, and the ratio of the median p99 to the baseline's.
#
#   bash bench/simisolation.sh                 (make bench-simisolation; make bench runs it)
#   ROUNDS=6 SECONDS_PER_RUN=10 OUT=/tmp/i.md bash bench/simisolation.sh
#   LABEL="the driver with one device lock (b23d55b)" bash bench/simisolation.sh
#   BASELINE=/tmp/old-sim bash bench/simisolation.sh  (also an older libcuda.so.1, alternating)
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_ROUNDS=4 DEFAULT_SECONDS_PER_RUN=6 DEFAULT_RATE=20 DEFAULT_LABEL="this build"
ROUNDS=${ROUNDS:-$DEFAULT_ROUNDS}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-$DEFAULT_SECONDS_PER_RUN} # each measured client's run
RATE=${RATE:-$DEFAULT_RATE}                                  # the Poisson client's requests/s
OUT=${OUT:-docs/results/simisolation.md}
BASELINE=${BASELINE:-}
LABEL=${LABEL:-$DEFAULT_LABEL}
EXTRA_ARGS="-r 100 -d 200" # the extra client: 100 kernels/s of 200 us
POSAPP=build/posapp
EXTRA=build/bench/simisolation
for b in $POSAPP $EXTRA; do
    [ -x "$b" ] || { echo "bench: build first (make all build/bench/simisolation)" >&2; exit 1; }
done
command -v chrt >/dev/null || { echo "bench: needs chrt (util-linux)" >&2; exit 1; }
T=$(mktemp -d)
# on any exit, this shell's own jobs still running (never a pid that may since be another's)
cleanup() {
    local j
    j=$(jobs -p)
    if [ -n "$j" ]; then
        kill -CONT $j 2>/dev/null || true
        kill -KILL $j 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    rm -rf "$T"
    # the virtual GPUs of clients killed here (those that exit leave none)
    rm -f /dev/shm/pos-sim."$(id -u)".bench-simisolation-$$-*
}
trap cleanup EXIT

libs=(build/sim)
[ -n "$BASELINE" ] && libs=("$BASELINE" build/sim)
cores=$(nproc)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# Stops PID for 50-150 ms at random moments 20-200 ms apart until it ends or FLAG is gone;
# writes the number of stops to FILE. Always leaves PID continued.
stopper() { # PID FLAG FILE
    local pid=$1 flag=$2 file=$3 n=0
    while [ -e "$flag" ] && kill -0 "$pid" 2>/dev/null; do
        sleep "0.$(printf '%03d' $((20 + RANDOM % 181)))"
        [ -e "$flag" ] || break
        kill -STOP "$pid" 2>/dev/null || break
        n=$((n + 1))
        sleep "0.$(printf '%03d' $((50 + RANDOM % 101)))"
        kill -CONT "$pid" 2>/dev/null || break
    done
    kill -CONT "$pid" 2>/dev/null || true
    echo "$n" >"$file"
}

# One run of configuration CONF on the driver in LIB (round R); results in $T/R-LIBI-CONF-*.
run_config() { # CONF LIB LIBI R
    local conf=$1 lib=$2 li=$3 r=$4 p="$T/$4-$3-$1" x= s= busy=()
    export LD_LIBRARY_PATH=$lib POS_SIM_INSTANCE="bench-simisolation-$$-$r-$li-$conf"
    echo "bench: simisolation round $((r + 1))/$ROUNDS, $conf, $lib..." >&2
    if [ "$conf" = c0 ] || [ "$conf" = c ]; then
        for ((i = 0; i < cores; i++)); do
            (while :; do :; done) &
            busy+=($!)
        done
    fi
    if [ "$conf" != c0 ]; then
        $EXTRA $EXTRA_ARGS -t $((SECONDS_PER_RUN + 60)) -s $((r + 1)) >"$p-extra.json" &
        x=$!
    fi
    sleep 0.5 # the extra client attached and running
    # in c it goes to SCHED_IDLE, every thread of it, only now: a first process starved while
    # it creates the virtual GPU can split the instance (docs/results/simisolation.md), which
    # is not what this measures
    [ "$conf" = c ] && chrt -a -i -p 0 "$x" >/dev/null
    $POSAPP --model resnet18 --requests 1000000 --duration "$SECONDS_PER_RUN" >"$p-closed1.json" &
    local m1=$!
    $POSAPP --model resnet18 --requests 1000000 --duration "$SECONDS_PER_RUN" >"$p-closed2.json" &
    local m2=$!
    $POSAPP --model resnet18 --arrival "poisson:$RATE" --seed $((r + 1)) \
        --requests $((RATE * SECONDS_PER_RUN)) >"$p-poisson.json" &
    local m3=$!
    if [ "$conf" = b ]; then
        touch "$p.stopping"
        stopper "$x" "$p.stopping" "$p-stops" &
        s=$!
    fi
    wait $m1 $m2 $m3
    if [ -n "$s" ]; then
        rm -f "$p.stopping"
        wait "$s"
    fi
    # the busy loops first: beside them an extra client at SCHED_IDLE might not run to see
    # its SIGTERM for a long time
    for b in "${busy[@]}"; do
        kill -KILL "$b" 2>/dev/null || true
        wait "$b" 2>/dev/null || true
    done
    if [ -n "$x" ]; then
        kill -CONT "$x" 2>/dev/null || true
        kill -TERM "$x" 2>/dev/null || true
        wait "$x" || echo "bench: the extra client failed ($conf, round $((r + 1)))" >&2
    fi
    for f in closed1 closed2 poisson; do
        [ -s "$p-$f.json" ] || { echo "bench: $f gave no result ($conf, round $((r + 1)))" >&2; exit 1; }
    done
    echo "$(cut -d' ' -f1 /proc/loadavg)" >"$p-load"
}

for ((r = 0; r < ROUNDS; r++)); do
    # alternate the order within each pair, so that neither side always runs first
    if ((r % 2 == 0)); then order=(a b c0 c); else order=(b a c c0); fi
    for conf in "${order[@]}"; do
        for li in "${!libs[@]}"; do
            run_config "$conf" "${libs[$li]}" "$li" "$r"
        done
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

invocation="bash bench/simisolation.sh"
for v in ROUNDS SECONDS_PER_RUN RATE BASELINE LABEL; do
    d=$(eval echo "\${DEFAULT_$v:-}")
    [ -n "${!v}" ] && [ "${!v}" != "$d" ] && invocation="$v=\"${!v}\" $invocation"
done
cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain -- sim 2>/dev/null | head -1)
[ -n "$dirty" ] && rev="$rev (sim/ modified)"
libnames=()
for li in "${!libs[@]}"; do
    if [ "${libs[$li]}" = "$BASELINE" ]; then libnames+=("baseline ($BASELINE)"); else libnames+=("$LABEL"); fi
done

python3 - "$T" "$ROUNDS" "$OUT" "$RATE" "$SECONDS_PER_RUN" "$cores" "$cpu" "$(uname -r)" "$rev" \
    "$load_before" "$load_after" "$invocation" "$EXTRA_ARGS" "${libnames[@]}" <<'PY'
import json, os, statistics, sys, time
(T, rounds, out, rate, secs, cores, cpu, kernel, rev, load_before, load_after, invocation,
 extra_args) = sys.argv[1:14]
libnames = sys.argv[14:]
rounds = int(rounds)
confs = ["a", "b", "c0", "c"]
base = {"b": "a", "c": "c0"}
clients = [("closed1", "resnet18 closed loop 1"), ("closed2", "resnet18 closed loop 2"),
           ("poisson", f"resnet18 Poisson {rate}/s")]
what = {"a": "extra client undisturbed", "b": "extra client stopped at random moments",
        "c0": f"{cores} busy loops, no extra client", "c": f"{cores} busy loops + extra client at SCHED_IDLE"}

def load(path):
    with open(path) as f:
        return json.loads(f.readline())

fig = {}   # (lib, conf, client) -> {"p99": [...], "p50": [...], "req": [...]}
extra = {} # (lib, conf) -> list of extra-client results
stops = {} # lib -> [stops per round]
loads = []
for r in range(rounds):
    for li in range(len(libnames)):
        for c in confs:
            p = f"{T}/{r}-{li}-{c}"
            for key, _ in clients:
                d = load(f"{p}-{key}.json")
                e = fig.setdefault((li, c, key), {"p99": [], "p50": [], "req": []})
                e["p99"].append(d["p99_ms"]); e["p50"].append(d["p50_ms"]); e["req"].append(d["requests"])
            if os.path.exists(f"{p}-extra.json") and os.path.getsize(f"{p}-extra.json"):
                extra.setdefault((li, c), []).append(load(f"{p}-extra.json"))
            if os.path.exists(f"{p}-stops"):
                stops.setdefault(li, []).append(int(open(f"{p}-stops").read()))
            loads.append(float(open(f"{p}-load").read()))

med = statistics.median
def cell(v, fmt="%.2f"):
    return (fmt % med(v)) + (" (" + fmt % min(v) + "–" + fmt % max(v) + ")" if len(v) > 1 else "")

rows, verdict = [], []
for li, lname in enumerate(libnames):
    for c in confs:
        for key, name in clients:
            e = fig[(li, c, key)]
            ratio = ""
            if c in base:
                b = med(fig[(li, base[c], key)]["p99"])
                x = med(e["p99"]) / b
                ratio = f"**{x:.3f}**"
                verdict.append((lname, c, name, x))
            rows.append(f"| {lname} | {c}: {what[c]} | {name} | {cell(e['p99'])} | {cell(e['p50'])} | "
                        f"{cell(e['req'], '%.0f')} | {ratio} |")
xrows = []
for li, lname in enumerate(libnames):
    for c in ["a", "b", "c"]:
        v = extra.get((li, c), [])
        if not v:
            continue
        xrows.append(f"| {lname} | {c} | {cell([d['kernels'] for d in v], '%.0f')} | "
                     f"{cell([d['worst_late_ms'] for d in v], '%.0f')} | "
                     f"{cell(stops[li], '%.0f') if c == 'b' and li in stops else '–'} |")
lines = []
for li, lname in enumerate(libnames):
    for c in ["b", "c"]:
        xs = [x for (l, cc, n, x) in verdict if l == lname and cc == c]
        ok = all(abs(x - 1) <= 0.05 for x in xs)
        lines.append(f"- {lname}, {c} against {base[c]}: p99 ratios "
                     + ", ".join(f"{x:.3f}" for x in xs)
                     + (": within 5%, target met." if ok else ": target missed."))
# how far a baseline's own p99 moves between rounds: a ratio closer to 1 than that cannot be
# told from the machine's noise
for li, lname in enumerate(libnames):
    spread = {c: max((max(v) - min(v)) / med(v) for v in (fig[(li, c, k)]["p99"] for k, _ in clients))
              for c in ["a", "c0"]}
    lines.append(f"- {lname}: the baselines' own p99 range over the rounds, (max - min) / median, "
                 f"is up to {100 * spread['a']:.0f}% (a) and {100 * spread['c0']:.0f}% (c0) here, "
                 f"the floor below which this run cannot resolve a change; the 5% target needs "
                 f"more rounds (ROUNDS) or longer runs (SECONDS_PER_RUN) on a quieter machine.")
summary = "\n".join(lines)

with open(out, "w") as o:
    o.write(f"""# A stopped or SCHED_IDLE process of the simulated GPU, and the others' p99

**Simulated** (the simulated driver on a {cores}-core VM, {cpu}, kernel {kernel}; a machine
shared with other developers' jobs). Produced by `{invocation}` on {time.strftime('%Y-%m-%d')},
commit {rev}; driver: {', '.join(libnames)}. Load average (1, 5, 15 min) {load_before} before,
{load_after} after; the 1-minute figure at the end of the runs ranged
{min(loads):.2f}–{max(loads):.2f}.

**Target** (issue 18): a process stopped (SIGSTOP) at any point, inside the driver included, or
running at `SCHED_IDLE` beside busy loops, changes no other process's request p99 by more than
5%.

Three measured clients share one virtual GPU (xavier-nx, timeslice): two `posapp --model
resnet18 --duration {secs}` closed loops and `posapp --model resnet18 --arrival poisson:{rate}`
({int(rate) * int(secs)} requests). Beside them one extra client of the same virtual GPU,
`build/bench/simisolation {extra_args}` (200 us kernels at 100 Poisson arrivals a second, each
polled with `cuStreamQuery` until done: a process inside driver calls most of the time; arrivals
it missed while it did not run are issued when it runs again, so its device work over a run
does not depend on the stops), started 0.5 s before them:

- **a**: the extra client runs undisturbed (the baseline of b);
- **b**: it is stopped with SIGSTOP for 50–150 ms at random moments 20–200 ms apart, throughout
  the run, and continued after each stop;
- **c0**: {cores} busy loops (one per core) at normal priority, no extra client (the baseline of c);
- **c**: the same busy loops and the extra client, moved to `SCHED_IDLE` with all its threads
  (`chrt -a -i -p 0`) once it has attached, as the measured clients start.

The extra client attaches at normal priority because a first process starved while it creates
the virtual GPU splits the instance on the driver with one device lock: a process that finds
the segment not yet initialised waits 2 s for its creator and then replaces it ("segment ... is
unusable: replacing it" under `POS_SIM_DEBUG=1`), so processes of one `POS_SIM_INSTANCE` end on
different virtual GPUs. Started at `SCHED_IDLE` beside the busy loops, that happened in one
round of four of an earlier run of this benchmark (the two closed loops then ran at their solo
latency, p50 5.6 ms, 1,000 requests each) and in one of four runs of the same start by hand.

{rounds} round{'s' if rounds != 1 else ''}; each runs a, b, c0, c (odd rounds b, a, c, c0), each configuration on its own
virtual GPU. Medians over the rounds, their range in brackets; *ratio* is the median p99 over
its baseline's median p99.

| driver | configuration | measured client | p99 ms | p50 ms | requests | p99 ratio |
|---|---|---|---|---|---|---|
""" + "\n".join(rows) + f"""

{summary}

The stops as behaviour (another process attaches, launches and synchronises while one is
stopped inside the driver; stops at random moments stall no other client) are checked by
`tests/integration/test_sim_isolation.c` (they fail on the driver with one device lock and
pass on the device-process driver). The
`SCHED_IDLE` case is measured here only: a test of the normal client's progress beside it (at
least half of it without) passed on the driver with one device lock, whose tail this table
shows moving instead.

The extra client: kernels it completed in the run (about 100 a second while it runs), the
longest it was late for an arrival (a stop, or the host not running it), and the stops it got:

| driver | configuration | kernels | latest arrival ms | stops |
|---|---|---|---|---|
""" + "\n".join(xrows) + "\n")
print(f"bench: wrote {out}", file=sys.stderr)
PY
