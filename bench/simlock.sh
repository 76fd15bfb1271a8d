#!/usr/bin/env bash
# How long and how often the processes of one virtual GPU wait for its device lock (the
# simulated driver's one process-shared mutex, docs/sim.md), under the demo's mix: a detector
# (resnet18, Poisson 300/s, SLO 3 ms) beside three batch models, simulated H200 with MPS, with
# no scheduler and under posd's fifo, priority and pos. Every process writes its lock figures
# at exit (POS_SIM_STATS); ROUNDS runs of scripts/demo.sh; medians over the rounds and their
# range. Writes docs/results/simlock.md.
#
#   bash bench/simlock.sh                  (make bench-simlock)
#   ROUNDS=5 OUT=/tmp/l.md bash bench/simlock.sh
#   BASELINE=/tmp/old/build/sim bash bench/simlock.sh   (an older libcuda.so.1 too, rounds
#                                                       alternating with this build's)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-docs/results/simlock.md}
BASELINE=${BASELINE:-}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
libs=("$PWD/build/sim")
[ -n "$BASELINE" ] && libs=("$(cd "$BASELINE" && pwd)" "$PWD/build/sim")
for ((r = 0; r < ROUNDS; r++)); do
    for ((l = 0; l < ${#libs[@]}; l++)); do
        echo "bench: demo round $((r + 1)) of $ROUNDS, ${libs[l]}..." >&2
        mkdir -p "$T/$l/$r"
        DEMO_SIM_DIR=${libs[l]} DEMO_SIM_STATS=$T/$l/$r bash scripts/demo.sh >"$T/demo-$l-$r.log" 2>&1
    done
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$T" "$ROUNDS" "$OUT" "$load" "${libs[@]}" <<'PY'
import glob, json, os, statistics, subprocess, sys, time
T, rounds, out, load = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
libs = sys.argv[5:]
runs = ["none", "fifo", "priority", "pos"]
names = ["detector", "batch-resnet18", "batch-resnet34", "batch-resnet50"]
# figures[(lib, run, name)][key] = [one value per round]
fig = {}
for L in range(len(libs)):
  for r in range(rounds):
    for run in runs:
        for name in names:
            res = json.load(open(f"{T}/{L}/{r}/{run}-result-{name}.json"))
            busy_ns = (res["mean_ms"] or 0) * 1e6 * res["requests"]
            for f in glob.glob(f"{T}/{L}/{r}/{run}-[0-9]*.json"):
                for line in open(f):
                    d = json.loads(line)
                    if d["name"] != name:
                        continue
                    a, g = d["app"], d["agent"]
                    e = fig.setdefault((L, run, name), {})
                    def add(k, v):
                        e.setdefault(k, []).append(v)
                    add("wait_req", 100 * a["wait_ns"] / busy_ns if busy_ns else 0)
                    add("wait_life", 100 * a["wait_ns"] / d["life_ns"])
                    add("contended", 100 * a["contended"] / max(a["locks"], 1))
                    add("wait_p99_us", a["wait_p99_ns"] / 1e3)
                    add("wait_max_us", a["wait_max_ns"] / 1e3)
                    add("hold_life", 100 * a["hold_ns"] / d["life_ns"])
                    add("agent_wait_life", 100 * g["wait_ns"] / d["life_ns"])
                    add("agent_hold_life", 100 * (g["hold_ns"]) / d["life_ns"])
                    add("p99_ms", res["p99_ms"] or 0)
def cell(v, fmt):
    m = statistics.median(v)
    return (fmt % m) + (" (" + fmt % min(v) + "-" + fmt % max(v) + ")" if len(v) > 1 else "")
rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with open(out, "w") as o:
    o.write(f"""# The simulated GPU's device lock under the demo's mix

**Simulated** (build/sim/libcuda.so.1 on a 2-core VM). `bash bench/simlock.sh` (ROUNDS={rounds}),
{time.strftime('%Y-%m-%d')}, commit {rev}, load average at the end {load}. Each round is one
`scripts/demo.sh` (a detector, resnet18 at Poisson 300 requests/s with a 3 ms SLO, beside the
resnet18+34+50 batch mix at batch 16, simulated H200, MPS) with `POS_SIM_STATS`: every process
counts its threads' acquisitions of the device lock, the waits of those that found it held and
how long it held it, its application's threads apart from its device agent (docs/sim.md).
Medians over the rounds, their range in brackets.

- *wait/req*: the application threads' time waiting for the lock, in % of the process's request
  time (requests x mean latency: for the closed-loop batch models nearly all its life, for the
  detector the time its requests were open);
- *wait/life*, *hold/life*: waiting and holding, in % of the process's time on the device;
- *contended*: % of acquisitions that found the lock held; *p99*, *max*: of those waits (p99 to
  the upper end of its power-of-two bucket);
- *agent*: the same for the process's device agent thread, which advances the model and reaps.

| driver | run | process | wait/req % | wait/life % | contended % | wait p99 us | wait max us | hold/life % | agent wait/life % | agent hold/life % | request p99 ms |
|---|---|---|---|---|---|---|---|---|---|---|---|
""")
    label = lambda L: "this build" if L == len(libs) - 1 else "baseline"
    for L in range(len(libs)):
      for run in runs:
        for name in names:
            e = fig.get((L, run, name))
            if not e:
                continue
            o.write(f"| {label(L)} | {run} | {name} | {cell(e['wait_req'], '%.2f')} | {cell(e['wait_life'], '%.2f')} | "
                    f"{cell(e['contended'], '%.1f')} | {cell(e['wait_p99_us'], '%.0f')} | "
                    f"{cell(e['wait_max_us'], '%.0f')} | {cell(e['hold_life'], '%.2f')} | "
                    f"{cell(e['agent_wait_life'], '%.2f')} | {cell(e['agent_hold_life'], '%.2f')} | "
                    f"{cell(e['p99_ms'], '%.2f')} |\n")
    o.write("\nTarget (issue 18): lock waits under 1% of any client's request time.\n")
    for L in range(len(libs)):
        worst = max((statistics.median(e["wait_req"]), run, name)
                    for (l, run, name), e in fig.items() if l == L)
        o.write(f"Worst median, {label(L)} ({libs[L]}): {worst[0]:.2f}% ({worst[2]} under {worst[1]}).\n")
    if len(libs) > 1:
        o.write(f"\nBaseline: `BASELINE={libs[0]}`, rounds alternating with this build's.\n")
print(f"bench: wrote {out}", file=sys.stderr)
PY
