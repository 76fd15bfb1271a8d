#!/usr/bin/python3
"""make bench-frontier: how far pos's own knobs can move it on issue 19's mixes, in possim.

For make demo's mix (a Poisson detector beside three batch closed loops, h200 MPS) and the two
steady isolation mixes of bench/isolation.sh (a latency closed loop beside batch closed loops of
other models, rtx3080 and h200 MPS), possim runs pos over a grid of its three co-location
knobs, corun_budget (how much slowdown a more important kernel may show before nothing runs
beside it), window_us (how much work a less important client may have in flight) and
corun_room (how many times the device's SMs the work beside a busy client above may ask for:
above 1, oversubscribed), on a host of 2
cores (this machine) and of 16 (the host CPU no constraint), with the CPU lever at idle, and
the references none, fifo and priority beside them. Each point is the median over SEEDS possim
seeds. For each mix it reports the points no other point beats on both figures (the frontier),
pos's default point, and the most batch work any point gets while it meets the latency target
(of points with the same figures, the one with the smallest knobs is listed).

Figures: demo: the detector's SLO attainment, and the batch speedup (the sum of each batch
model's req/s over its req/s alone in possim, as bench/cpu.sh). Steady mixes: the latency
client's p99 over its p99 alone under pos, and the batch clients' launches/s over fifo's (as
bench/isolation.sh). Issue 19's targets: demo SLO >= 0.99 with speedup >= 1.2; steady p99 <=
1.10 x solo with batch >= 0.8 x fifo's.

Every figure is simulated and in virtual time: this maps what pos's rules can reach on the
simulated device (docs/sim.md), a hypothesis for end-to-end runs, not a result of them.

    python3 bench/frontier.py                      (make bench-frontier)
    SEEDS=1 MIXES=demo OUT=/tmp/f.md python3 bench/frontier.py
"""
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

POSSIM = os.environ.get("POSSIM", "build/possim")
OUT = os.environ.get("OUT", "docs/results/frontier.md")
CSV = os.environ.get("CSV", os.path.splitext(OUT)[0] + ".csv")
SEEDS = [int(s) for s in os.environ.get("SEEDS", "1 2 3").split()]
MIXES = os.environ.get("MIXES", "demo steady-h200 steady-rtx3080").split()
CORES = [int(c) for c in os.environ.get("CORES", "2 16").split()]
BUDGETS = [float(b) for b in os.environ.get("BUDGETS", "1.1 1.2 1.5 3 100").split()]
WINDOWS = [int(w) for w in os.environ.get("WINDOWS", "250 500 2000").split()]
ROOMS = [float(t) for t in os.environ.get("ROOMS", "1 1.5 2 4 16").split()]
# bench/isolation.sh's calibrated completion lag, as its last run recorded it
# (docs/results/isolation-idle.md): possim's [device] notify_us for the steady mixes
NOTIFY_US = os.environ.get("NOTIFY_US", "38")
DEFAULT = ("pos", 1.2, 500, 1.0)  # pos's defaults: corun_budget, window_us, corun_room
JOBS = int(os.environ.get("JOBS", str(os.cpu_count() or 1)))

MIX = {
    "demo": dict(dev="h200", slo=3, notify=None,
                 lat=("detector", "resnet18", 1500, "poisson:300", 0),
                 batch=[("batch-resnet18", "resnet18", 16), ("batch-resnet34", "resnet34", 16),
                        ("batch-resnet50", "resnet50", 16)]),
    "steady-h200": dict(dev="h200", slo=4, notify=NOTIFY_US,
                        lat=("lat", "resnet50", 400, "closed", 300),
                        batch=[("batch-c0", "resnet18", 8), ("batch-c1", "inception_v3", 8)]),
    "steady-rtx3080": dict(dev="rtx3080", slo=5, notify=NOTIFY_US,
                           lat=("lat", "resnet50", 400, "closed", 300),
                           batch=[("batch-c0", "resnet18", 1), ("batch-c1", "inception_v3", 1)]),
}


def ini(mix, policy, cores, budget=None, window=None, room=None, only=None):
    """The scenario's text: all clients, or only the latency one (only='lat') or one batch
    client alone (only=its name, under fifo)."""
    m = MIX[mix]
    s = ["[device]", f"preset = {m['dev']}", "mode = mps"]
    if m["notify"] is not None:
        s.append(f"notify_us = {m['notify']}")
    s += ["[sched]", f"policy = {policy}", "cpu = idle"]
    if budget is not None:
        s.append(f"corun_budget = {budget:g}")
    if window is not None:
        s.append(f"window_us = {window}")
    if room is not None:
        s.append(f"corun_room = {room:g}")
    s += ["[host]", f"cores = {cores}"]
    name, model, n, arrival, start = m["lat"]
    if only in (None, "lat"):
        s += [f"[client {name}]", f"model = {model}", f"requests = {n}", f"arrival = {arrival}",
              f"slo_ms = {m['slo']}", "class_priority = 10",
              f"start_ms = {start if only is None else 0}"]
    for bname, bmodel, batch in m["batch"]:
        if only is None or only == bname:
            s += [f"[client {bname}]", f"model = {bmodel}", f"batch = {batch}",
                  "class_priority = 20"]
            s += ["requests = 100000000", "stop_with = " + name] if only is None else \
                 ["requests = 300"]
    return "\n".join(s) + "\n"


def opt(x):
    """A grid value as the tables print it ('' for none)."""
    return "" if x is None else f"{x:g}"


def possim(text, seed):
    r = subprocess.run([POSSIM, "-o", "json", "--seed", str(seed), "/dev/stdin"], input=text,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench-frontier: possim failed: {r.stderr.strip()}\n{text}")
    return {c["name"]: c for c in json.loads(r.stdout)["clients"]}


def batch_rate(mix, clients):
    """The batch clients' launches over their summed active times (bench/isolation.sh's)."""
    batch = MIX[mix]["batch"]
    span = sum(clients[b]["active_s"] for b, _, _ in batch)
    return sum(clients[b]["launches"] for b, _, _ in batch) / span if span > 0 else 0.0


def figures(mix, clients, ref, seed):
    """(latency figure, batch figure) of one run of SEED; ref: the mix's references (each
    batch model's rate alone; per seed, the latency client's solo p99 and fifo's batch rate)."""
    m = MIX[mix]
    lat = clients[m["lat"][0]]
    if mix == "demo":
        return (lat["slo_attainment"],
                sum(clients[b]["throughput_rps"] / ref["alone"][b] for b, _, _ in m["batch"]))
    return (lat["p99_ms"] / ref["solo_p99"][seed],
            batch_rate(mix, clients) / ref["fifo_rate"][seed])


def main():
    if not os.access(POSSIM, os.X_OK):
        sys.exit(f"bench-frontier: {POSSIM}: build first (make)")
    t0, cpu0 = time.time(), os.times()
    pool = concurrent.futures.ThreadPoolExecutor(JOBS)
    rows = []  # (mix, cores, policy, budget, window, room, seed, lat figure, batch figure)
    for mix in MIXES:
        m = MIX[mix]
        for cores in CORES:
            # the references every figure is against: each batch model alone (demo), the
            # latency client alone under pos and fifo's batch rate (steady), per seed
            ref = {"alone": {}, "solo_p99": {}, "fifo_rate": {}}
            if mix == "demo":
                for b, _, _ in m["batch"]:
                    ref["alone"][b] = possim(ini(mix, "fifo", cores, only=b), 1)[b]["throughput_rps"]
            else:
                for seed in SEEDS:
                    ref["solo_p99"][seed] = possim(ini(mix, "pos", cores, only="lat"),
                                                   seed)[m["lat"][0]]["p99_ms"]
                    ref["fifo_rate"][seed] = batch_rate(mix, possim(ini(mix, "fifo", cores), seed))
            points = [(pol, None, None, None) for pol in ("none", "fifo", "priority")]
            points += [("pos", b, w, r) for b in BUDGETS for w in WINDOWS for r in ROOMS]
            futs = {}
            for pt in points:
                for seed in SEEDS:
                    futs[pt + (seed,)] = pool.submit(possim, ini(mix, pt[0], cores, *pt[1:]), seed)
            for key, fut in futs.items():
                lf, bf = figures(mix, fut.result(), ref, key[-1])
                rows.append((mix, cores) + key + (lf, bf))
            print(f"bench-frontier: {mix} on {cores} cores: {len(futs)} runs", file=sys.stderr)
    cpu1 = os.times()
    write(rows, time.time() - t0,
          cpu1.children_user + cpu1.children_system - cpu0.children_user - cpu0.children_system)


def medians(rows):
    """{(mix, cores, policy, budget, window, room): (lat median, batch median, lat min, lat max,
    batch min, batch max)} over the seeds."""
    acc = {}
    for mix, cores, pol, b, w, r, _, lf, bf in rows:
        acc.setdefault((mix, cores, pol, b, w, r), []).append((lf, bf))
    out = {}
    for k, v in acc.items():
        ls, bs = [x[0] for x in v], [x[1] for x in v]
        out[k] = (statistics.median(ls), statistics.median(bs), min(ls), max(ls), min(bs),
                  max(bs))
    return out


def better(mix, a, b):
    """Is latency figure a at least as good as b (SLO attainment: higher; p99 ratio: lower)?"""
    return a >= b if mix == "demo" else a <= b


def meets(mix, lf):
    return lf >= 0.99 if mix == "demo" else lf <= 1.10


def write(rows, wall, cpu):
    med = medians(rows)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    with open(CSV, "w") as f:
        f.write("mix,cores,policy,corun_budget,window_us,corun_room,seed,latency_figure,"
                "batch_figure\n")
        for mix, cores, pol, b, w, r, seed, lf, bf in rows:
            f.write(f"{mix},{cores},{pol},{opt(b)},{opt(w)},{opt(r)},{seed},"
                    f"{lf:.4f},{bf:.4f}\n")
    L = []
    L.append("# pos's frontier on issue 19's mixes (possim, simulated)\n")
    L.append(f"`make bench-frontier` (`python3 bench/frontier.py`) at commit {commit}"
             f"{' with uncommitted changes' if dirty else ''}, {time.strftime('%Y-%m-%d')}, "
             f"{wall:.0f} s ({cpu:.0f} CPU s of possim), seeds {' '.join(map(str, SEEDS))}.\n")
    L.append("Every figure is simulated, in virtual time (possim: the same core and policies "
             "as posd, its host model, the simulated device of docs/sim.md). pos runs over a "
             "grid of its co-location knobs: `corun_budget` in "
             f"{', '.join(f'{b:g}' for b in BUDGETS)}, `window_us` in "
             f"{', '.join(map(str, WINDOWS))} and `corun_room` in "
             f"{', '.join(f'{r:g}' for r in ROOMS)} (defaults 1.2, 500 and 1), with "
             "`[sched] cpu = idle`, "
             f"on a host of {' and of '.join(map(str, CORES))} cores (possim's `[host] cores`; "
             f"this machine has {os.cpu_count()}). "
             "Each cell is the median over the seeds (min..max). Full grid: "
             f"[{os.path.basename(CSV)}]({os.path.basename(CSV)}).\n")
    for mix in MIXES:
        demo = mix == "demo"
        m = MIX[mix]
        lname = "detector SLO attainment" if demo else "latency p99 / solo"
        bname = "batch speedup" if demo else "batch / fifo"
        target = ("SLO attainment >= 0.99 with batch speedup >= 1.2" if demo
                  else "latency p99 <= 1.10 x solo with batch >= 0.8 x fifo's")
        L.append(f"## {mix}\n")
        name, model, n, arrival, _ = m["lat"]
        L.append(f"{m['dev']} with MPS: {name} ({model}, {n} requests, {arrival}, SLO "
                 f"{m['slo']} ms) beside " + ", ".join(f"{bm} at batch {bb}" for _, bm, bb in
                                                       m["batch"]) +
                 f" (closed loops). Issue 19's target: {target}.\n")
        for cores in CORES:
            pts = {k[2:]: v for k, v in med.items() if k[0] == mix and k[1] == cores}
            grid = {k: v for k, v in pts.items() if k[0] == "pos"}
            front = [k for k, v in grid.items()
                     if not any(better(mix, u[0], v[0]) and u[1] >= v[1] and
                                (u[0] != v[0] or u[1] != v[1]) for u in grid.values())]
            front.sort(key=lambda k: (grid[k][1], k[1:]))
            # points with the same figures as one listed already (the knob beyond what binds): once
            seen, kept = set(), []
            for k in front:
                if grid[k][:2] not in seen:
                    seen.add(grid[k][:2])
                    kept.append(k)
            front = kept
            ok = [k for k, v in grid.items() if meets(mix, v[0])]
            best = max(ok, key=lambda k: grid[k][1]) if ok else None
            L.append(f"**{cores} cores**{' (the host CPU no constraint)' if cores >= 16 else ''}.\n")
            L.append(f"| policy | corun_budget | window_us | corun_room | {lname} | {bname} |")
            L.append("|---|---|---|---|---|---|")

            def row(k, tag=""):
                v = pts[k]
                L.append(f"| {k[0]}{tag} | " + " | ".join(opt(x) for x in k[1:]) +
                         f" | {v[0]:.3f} ({v[2]:.3f}..{v[3]:.3f}) | "
                         f"{v[1]:.3f} ({v[4]:.3f}..{v[5]:.3f}) |")
            for ref in ("none", "fifo", "priority"):
                row((ref, None, None, None))
            if DEFAULT in pts:
                row(DEFAULT, " (default)")
            for k in front:
                row(k, " (frontier)")
            L.append("")
            whole = [r for r in ("none", "fifo", "priority")
                     if meets(mix, pts[(r, None, None, None)][0]) and
                     pts[(r, None, None, None)][1] >= (1.2 if demo else 0.8)]
            if whole:
                L.append(f"Meeting the whole target without pos: {', '.join(whole)}.\n")
            if best is None:
                L.append(f"No pos point meets the latency half of the target on {cores} "
                         "cores.\n")
            else:
                v = grid[best]
                L.append(f"The most batch work of a pos point that meets the latency half: "
                         f"{bname} {v[1]:.3f} at {lname} {v[0]:.3f} (corun_budget "
                         f"{best[1]:g}, window_us {best[2]}, corun_room {best[3]:g}); the "
                         f"target asks "
                         f"{'1.2' if demo else '0.8'}: "
                         f"{'met' if v[1] >= (1.2 if demo else 0.8) else 'missed'}.\n")
    with open(OUT, "w") as f:
        f.write("\n".join(L))
    print(f"bench-frontier: wrote {OUT} and {CSV}", file=sys.stderr)


if __name__ == "__main__":
    main()
