#!/usr/bin/env bash
# What the simulated GPU's driver costs the processes end to end, this build's against another
# (BASELINE, a build/sim folder of an older commit), rounds alternating: (1) the demo's
# detector alone (resnet18, Poisson 300/s, SLO 3 ms, simulated H200 with MPS; no shim, no
# posd): its latency is the device's plus what the driver adds to show each completion; (2)
# scripts/demo.sh whole: the detector's SLO attainment and p99 and the batch mix's speedup
# under no scheduler, priority and pos. Medians over the rounds and their range. Simulated.
# Writes docs/results/simdevice.md.
#
#   BASELINE=/tmp/old/build/sim bash bench/simdevice.sh     (make bench-simdevice needs it)
#   ROUNDS=5 DEMO_ROUNDS=2 OUT=/tmp/d.md BASELINE=... bash bench/simdevice.sh
#   LABEL="the device-process driver" BASELINE_LABEL="the one-lock driver (09ce247)" ...
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
DEMO_ROUNDS=${DEMO_ROUNDS:-3}
OUT=${OUT:-docs/results/simdevice.md}
BASELINE=${BASELINE:-}
LABEL=${LABEL:-this build}
BASELINE_LABEL=${BASELINE_LABEL:-$BASELINE}
[ -n "$BASELINE" ] && [ -e "$BASELINE/libcuda.so.1" ] || {
    echo "bench-simdevice: BASELINE=DIR, a build/sim folder (libcuda.so.1) to compare with" >&2
    exit 2
}
[ -x build/posapp ] && [ -e build/sim/libcuda.so.1 ] || {
    echo "bench-simdevice: build first (make)" >&2
    exit 1
}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
libs=("$(cd "$BASELINE" && pwd)" "$PWD/build/sim")
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < ROUNDS; r++)); do
    for l in 0 1; do
        LD_LIBRARY_PATH=${libs[l]} POS_SIM_DEVICE=h200 POS_SIM_MODE=mps \
            POS_SIM_INSTANCE=bench-simdevice-$$-$l-$r build/posapp --model resnet18 \
            --requests 600 --arrival poisson:300 --slo 3 >"$T/alone-$l-$r.json"
        LD_LIBRARY_PATH=${libs[l]} POS_SIM_DEVICE=h200 POS_SIM_MODE=mps \
            POS_SIM_INSTANCE=bench-simdevice-mb-$$-$l-$r build/posapp --microbench 20000 \
            >"$T/mb-$l-$r.json"
    done
done
for ((r = 0; r < DEMO_ROUNDS; r++)); do
    for l in 0 1; do
        echo "bench-simdevice: demo round $((r + 1)) of $DEMO_ROUNDS, ${libs[l]}..." >&2
        DEMO_SIM_DIR=${libs[l]} bash scripts/demo.sh >"$T/demo-$l-$r.log" 2>&1
    done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$T" "$ROUNDS" "$DEMO_ROUNDS" "$OUT" "$load0" "$load1" "$LABEL" "$BASELINE_LABEL" \
    "$BASELINE" <<'PY'
import json, re, statistics, subprocess, sys, time
T, rounds, drounds, out, load0, load1, label, blabel, base = sys.argv[1:10]
rounds, drounds = int(rounds), int(drounds)
names = [blabel, label]
def cell(v, fmt="%.3f"):
    v = [x for x in v if x is not None]
    if not v:
        return "-"
    m = statistics.median(v)
    return (fmt % m) + (" (" + fmt % min(v) + "–" + fmt % max(v) + ")" if len(v) > 1 else "")
alone = {}
for l in (0, 1):
    for r in range(rounds):
        d = json.load(open(f"{T}/alone-{l}-{r}.json"))
        for k in ("p50_ms", "p99_ms", "slo_attainment"):
            alone.setdefault((l, k), []).append(d[k])
        m = json.load(open(f"{T}/mb-{l}-{r}.json"))
        for k in ("launch_ns_p50", "launch_ns_mean"):
            alone.setdefault((l, k), []).append(m[k])
demo = {}
row = re.compile(r"^\s+(none|fifo|priority|pos)\s+\|\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\|")
for l in (0, 1):
    for r in range(drounds):
        for line in open(f"{T}/demo-{l}-{r}.log"):
            m = row.match(line)
            if m:
                for k, v in zip(("slo", "p99", "speedup"), m.groups()[1:]):
                    demo.setdefault((l, m.group(1), k), []).append(float(v))
rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                     text=True).stdout.strip()
def med(l, k):
    return statistics.median(alone[(l, k)])
with open(out, "w") as o:
    o.write(f"""# What the simulated driver adds end to end: {label} against {blabel}

**Simulated** (the simulated driver on a 2-core VM shared with other jobs). Produced by
`BASELINE={base} LABEL="{label}" BASELINE_LABEL="{blabel}" bash bench/simdevice.sh`
(ROUNDS={rounds}, DEMO_ROUNDS={drounds}) on {time.strftime('%Y-%m-%d')}, commit {rev}; load
average {load0} before, {load1} after. Rounds alternate between the two drivers; medians over
the rounds, their range in brackets.

## The detector alone

`posapp --model resnet18 --requests 600 --arrival poisson:300 --slo 3` on a simulated H200
(MPS), no shim and no posd: what the device takes plus what the driver adds before the
process sees each request's end.

| driver | p50 ms | p99 ms | SLO attainment |
|---|---|---|---|
""")
    for l in (0, 1):
        o.write(f"| {names[l]} | {cell(alone[(l, 'p50_ms')])} | {cell(alone[(l, 'p99_ms')])} | "
                f"{cell(alone[(l, 'slo_attainment')])} |\n")
    o.write(f"""
p50 {med(1, 'p50_ms') / med(0, 'p50_ms'):.3f}x and p99 {med(1, 'p99_ms') / med(0, 'p99_ms'):.3f}x
the baseline's (medians).

## A launch

`posapp --microbench 20000` (back-to-back launches of a tiny kernel, no shim): the time of one
`cuLaunchKernel` call, in the same rounds.

| driver | launch p50 ns | launch mean ns |
|---|---|---|
""")
    for l in (0, 1):
        o.write(f"| {names[l]} | {cell(alone[(l, 'launch_ns_p50')], '%.0f')} | "
                f"{cell(alone[(l, 'launch_ns_mean')], '%.0f')} |\n")
    o.write(f"""

## The demo's mix

`scripts/demo.sh` with `DEMO_SIM_DIR` set to each driver (the detector beside the
resnet18+34+50 batch mix, simulated H200, MPS): the detector's SLO attainment and p99 and the
batch speedup, real processes (the demo's side-by-side table).

| policy | driver | detector SLO | detector p99 ms | batch speedup |
|---|---|---|---|---|
""")
    for pol in ("none", "fifo", "priority", "pos"):
        for l in (0, 1):
            if (l, pol, "slo") not in demo:
                continue
            o.write(f"| {pol} | {names[l]} | {cell(demo[(l, pol, 'slo')])} | "
                    f"{cell(demo[(l, pol, 'p99')], '%.2f')} | "
                    f"{cell(demo[(l, pol, 'speedup')], '%.2f')} |\n")
print(open(out).read())
PY
