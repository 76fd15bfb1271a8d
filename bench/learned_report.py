#!/usr/bin/python3
"""docs/results/learned.md and learned-curve.svg from bench/learned.sh's runs (its T dir)."""
import csv
import os
import platform
import statistics
import subprocess
import sys
import time

T, OUT, SEEDS, EPOCHS, EVAL_SEEDS, DECIDE, TRAIN_S, WALL = sys.argv[1:9]
REUSED = sys.argv[9] if len(sys.argv) > 9 else ""
REUSED_WHAT = sys.argv[10] if len(sys.argv) > 10 else "an earlier run"
SEEDS = SEEDS.split()
EVAL_SEEDS = EVAL_SEEDS.split()
decide = dict(x.split(":") for x in DECIDE.split())
train_s = dict(x.split(":") for x in TRAIN_S.split())


def med(v):
    return statistics.median(v) if v else float("nan")


# ---- held-out rows: family|name|policy|seed|slo p99 batch decide makespan
rows = {}
for line in open(os.path.join(T, "heldout.txt")):
    fam, name, pol, seed, vals = line.rstrip("\n").split("|")
    slo, p99, b, dec, mk = map(float, vals.split())
    rows.setdefault((fam, name), {}).setdefault(pol, []).append((slo, p99, b))
policies = ["fifo", "priority", "pos"] + ["learned" + s for s in SEEDS]
fams = []
for fam, _ in rows:
    if fam not in fams:
        fams.append(fam)


def stat(pol, fam=None, name=None):
    """median over eval seeds, then mean over the family's rows"""
    s, p, b = [], [], []
    for (f, n), by in rows.items():
        if (fam and f != fam) or (name and n != name) or pol not in by:
            continue
        s.append(med([x[0] for x in by[pol]]))
        p.append(med([x[1] for x in by[pol]]))
        b.append(med([x[2] for x in by[pol]]))
    return (statistics.mean(s), statistics.mean(p), statistics.mean(b)) if s else None


lines = []
w = lines.append
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
cpu = ""
for l in open("/proc/cpuinfo"):
    if l.startswith("model name"):
        cpu = l.split(":", 1)[1].strip()
        break
w("# Policy learned against the hand-written policies")
w("")
w("**Simulated GPU, virtual time.** Produced by `bash bench/learned.sh` (or `make bench-learned`)"
  " on %s, %d cores (%s), kernel %s, commit %s, in %s s. Every figure is possim's: nothing here "
  "ran on a GPU. Method: [learned.md](../learned.md)." % (
      time.strftime("%Y-%m-%d"), os.cpu_count(), cpu, platform.release(), commit, WALL))
w("")
if REUSED:
    w("This run evaluated the weights of an earlier run's training (`REUSE=%s`: %s); "
      "training is deterministic for a seed, so `bash bench/learned.sh` trains the same "
      "weights again." % (REUSED, REUSED_WHAT))
    w("")
w("Training: `possim train --seed S` over the %s training mixes of `bench/learned_mixes.py` "
  "(rtx3080 and orin-agx MPS, xavier-nx time-sliced; resnet18, mobilenet_v2, inception_v3 "
  "beside resnet50, bert_base, mobilenet_v1; Poisson at 50, 70, 90%% load; churn at 70%%), "
  "%s epochs, seeds %s. Held out (named in bench/learned_mixes.py before any training): h200; "
  "resnet34, mobilenet_v3, inception_v1 beside yolop, inception_v1, mobilenet_v3, resnet34; "
  "60 and 80%% load; Gamma arrivals (shape 0.25) as well as Poisson; churn at 60%%. Each "
  "held-out row ran with possim seeds %s; a cell is the median over those seeds, a family's "
  "the mean over its rows (3 latency models)." % (
      sum(1 for l in open(os.path.join(T, "train.curriculum")) if l.startswith("[mix")),
      EPOCHS, ", ".join(SEEDS), ", ".join(EVAL_SEEDS)))
w("")

# summary against pos
w("## In short")
w("")
worst = {}
better = []
for s in SEEDS:
    for fam in fams:
        a, b = stat("learned" + s, fam), stat("pos", fam)
        d = a[0] - b[0]
        worst[(s, fam)] = d
        if d > 0.001 or (abs(d) <= 0.001 and a[1] < 0.99 * b[1]):
            better.append((s, fam))
w("| target | result |")
w("|---|---|")
for s in SEEDS:
    ws = min((worst[(s, f)], f) for f in fams)
    w("| never below pos by more than 0.01 of SLO attainment on a family (seed %s) | %s: "
      "worst %+.4f (%s) |" % (s, "met" if ws[0] >= -0.01 else "**missed**", ws[0], ws[1]))
    bf = [f for (ss, f) in better if ss == s]
    w("| better than pos on at least one family (seed %s) | %s |" % (
        s, ("met: " + ", ".join(bf)) if bf else "**missed**"))
w("| at most 5 us per decision at 8 clients | %s: learned %s us, pos %s us (possim's mean "
  "sched_core_decide, median of 3 runs) |" % (
      "met" if float(decide.get("learned", "99")) <= 5 else "**missed**",
      decide.get("learned"), decide.get("pos")))
ts = max(float(v) for v in train_s.values())
w("| training under 30 CPU-minutes | %s: %s CPU s per seed (%s epochs) |" % (
    "met" if ts <= 1800 else "**missed**", ", ".join("%s" % v for v in train_s.values()),
    EPOCHS))
w("")

w("## Held-out dynamic workloads: the latency client's SLO attainment / p99 ms, the others' "
  "requests per second")
w("")
w("| family | " + " | ".join(policies) + " |")
w("|---|" + "---|" * len(policies))
for fam in fams:
    cells = []
    for p in policies:
        st = stat(p, fam)
        cells.append("%.4f / %.2f / %.0f" % st if st else "-")
    w("| %s | %s |" % (fam, " | ".join(cells)))
w("")
w("Every row (medians over the seeds):")
w("")
w("| row | " + " | ".join(policies) + " |")
w("|---|" + "---|" * len(policies))
for (fam, name), by in rows.items():
    cells = []
    for p in policies:
        st = stat(p, fam, name)
        cells.append("%.4f / %.2f / %.0f" % st if st else "-")
    w("| %s | %s |" % (name, " | ".join(cells)))
w("")
# spread over eval seeds for learned vs pos
w("Spread: the SLO attainment of each row's %d runs, lowest-highest, pos against learned "
  "(seed %s):" % (len(EVAL_SEEDS), SEEDS[0]))
w("")
for (fam, name), by in rows.items():
    a = [x[0] for x in by["pos"]]
    b = [x[0] for x in by["learned" + SEEDS[0]]]
    w("- %s: pos %.4f-%.4f, learned %.4f-%.4f" % (name, min(a), max(a), min(b), max(b)))
w("")

# static
w("## Static mixes (h200, MPS, held-out models, batch 1, 60 requests a model)")
w("")
w("Time of one round (a request of every model), µs of virtual time: `possim search`'s "
  "predictions for the sequential, greedy and DP stage schedules (and the searches' CPU "
  "seconds), then possim end to end: fifo, pos and learned (makespan / requests), staged "
  "following the DP schedule (its longest median request, as bench/search.sh measures it).")
w("")
w("| mix | sequential | greedy | DP | greedy cpu_s | DP cpu_s | fifo | pos | learned | staged (DP) | learned / DP |")
w("|---|---|---|---|---|---|---|---|---|---|---|")
speed = []
for line in open(os.path.join(T, "static.txt")):
    f = line.rstrip("\n").split("|")
    mix, seq, gr, dp, gcpu, dcpu, fifo, pos, lr, stg = f
    speed.append((mix, float(seq) / float(gr), float(seq) / float(dp), float(dcpu),
                  float(lr) / float(dp), float(stg) / float(dp)))
    w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.3f |" % (
        mix, seq, gr, dp, gcpu, dcpu, fifo, pos, lr, stg, float(lr) / float(dp)))
w("")
w("POS's comparison (YOLOP on Xavier NX, frames per second; shared/PAPERS.md): MEOS 31.8, "
  "CDS 26.9, DP 25.0, greedy 23.7, actor-critic 21.8, sequential 14.9: DP 1.68x and greedy "
  "1.59x sequential, MEOS 1.27x DP, after 110-160 s of search. Here, predicted: " +
  "; ".join("%s greedy %.2fx and DP %.2fx sequential (DP in %.1f CPU s)" % (m, g, d, c)
            for m, g, d, c, _, _ in speed) +
  ". `learned` makes no choice on these mixes (one class, no SLO: no client is outranked, "
  "so the network is never asked), so it runs as `pos` and `fifo` do: " +
  "; ".join("%.3fx DP's predicted round on %s" % (l, m) for m, _, _, _, l, _ in speed) +
  " (the target, within 5%% of DP, %s), while the DP schedule followed end to end by "
  "`staged` takes " % ("met" if all(l <= 1.05 for *_, l, _ in speed) else "**missed**") +
  "; ".join("%.2fx" % st for *_, st in speed) +
  " its prediction (its barriers on this 2-core host model; docs/results/search.md).")
w("")

# end to end
e2e = {}
for line in open(os.path.join(T, "e2e.txt")):
    name, pol, rep, vals = line.rstrip("\n").split("|")
    slo, p99, b = map(float, vals.split())
    e2e.setdefault(name, {}).setdefault(pol, []).append((slo, p99, b))
if e2e:
    w("## End to end: the best and worst held-out rows")
    w("")
    w("The rows where `learned` (seed %s) gained most and lost most SLO attainment against "
      "`pos` in possim (churn rows left out), as real processes: posd (`-p pos` or `-p "
      "learned` with `[policy] weights`), the latency client and the batch clients as posapp "
      "under libposshim.so on the simulated driver (h200, MPS), %d runs each; medians "
      "(lowest-highest SLO attainment), against possim's median of the same row." % (
          SEEDS[0], max(len(v) for by in e2e.values() for v in by.values())))
    w("")
    w("| row | policy | SLO attainment | p99 ms | batch req/s | possim: SLO / p99 / batch |")
    w("|---|---|---|---|---|---|")
    for name, by in e2e.items():
        for pol, runs in by.items():
            key = pol if pol == "pos" else "learned" + SEEDS[0]
            sim = [r for (f, n), bb in rows.items() if n == name for r in bb.get(key, [])]
            w("| %s | %s | %.4f (%.4f-%.4f) | %.2f | %.0f | %.4f / %.2f / %.0f |" % (
                name, pol, med([r[0] for r in runs]), min(r[0] for r in runs),
                max(r[0] for r in runs), med([r[1] for r in runs]), med([r[2] for r in runs]),
                med([r[0] for r in sim]), med([r[1] for r in sim]), med([r[2] for r in sim])))
    w("")

# curve
w("## Training curve (seed %s)" % SEEDS[0])
w("")
w("![training curve](learned-curve.svg)")
w("")
w("[learned-curve.csv](learned-curve.csv): per epoch, the greedy evaluation on the training "
  "mixes (reward per virtual second, SLO attainment, worst p99, batch requests per second) and "
  "pos's on the same runs, the losses, the temperature, the share of choices not pos's.")
w("")
for s in SEEDS:
    log = open(os.path.join(T, "train%s.log" % s)).read().strip().splitlines()
    w("Seed %s, `possim train` said:" % s)
    w("")
    w("```")
    for l in log:
        w(l)
    w("```")
    w("")
open(os.path.join(OUT, "learned.md"), "w").write("\n".join(lines) + "\n")

# ---- the SVG: eval reward relative to pos, SLO attainment, per epoch
rows_c = [r for r in csv.reader(l for l in open(os.path.join(T, "s%s.csv" % SEEDS[0]))
                                if not l.startswith("#"))]
hdr, data = rows_c[0], rows_c[1:]
ix = {h: i for i, h in enumerate(hdr)}
ep = [int(r[ix["epoch"]]) for r in data]
rel = [(float(r[ix["eval_reward_per_s"]]) - float(r[ix["pos_reward_per_s"]])) /
       abs(float(r[ix["pos_reward_per_s"]])) * 100 for r in data]
slo = [float(r[ix["eval_slo_attainment"]]) for r in data]
pos_slo = float(data[0][ix["pos_slo_attainment"]]) if data else 0
W, H, L, B = 640, 300, 60, 40


def poly(xs, ys, lo, hi, color, dash=""):
    pts = []
    for x, y in zip(xs, ys):
        px = L + (x - xs[0]) / max(1, xs[-1] - xs[0]) * (W - L - 20)
        py = H - B - (y - lo) / (hi - lo if hi > lo else 1) * (H - B - 20)
        pts.append("%.1f,%.1f" % (px, py))
    return '<polyline fill="none" stroke="%s" stroke-width="2" %s points="%s"/>' % (
        color, 'stroke-dasharray="5,4"' if dash else "", " ".join(pts))


lo_r, hi_r = min(rel + [0]) - 1, max(rel + [0]) + 1
lo_s, hi_s = min(slo + [pos_slo]) - 0.01, max(slo + [pos_slo]) + 0.01
svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
       'font-size="12">' % (W, H),
       '<rect width="100%" height="100%" fill="white"/>',
       '<text x="%d" y="14">possim train, seed %s: greedy evaluation on the training mixes '
       '(simulated)</text>' % (L, SEEDS[0]),
       '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - 20, H - B),
       '<line x1="%d" y1="20" x2="%d" y2="%d" stroke="black"/>' % (L, L, H - B),
       '<text x="%d" y="%d">epoch %d..%d</text>' % (W // 2 - 30, H - 10, ep[0], ep[-1]) if ep else "",
       poly(ep, rel, lo_r, hi_r, "#1f77b4") if ep else "",
       poly(ep, [0] * len(ep), lo_r, hi_r, "#1f77b4", "d") if ep else "",
       poly(ep, slo, lo_s, hi_s, "#d62728") if ep else "",
       poly(ep, [pos_slo] * len(ep), lo_s, hi_s, "#d62728", "d") if ep else "",
       '<text x="%d" y="34" fill="#1f77b4">reward per s against pos, %% (%.1f..%.1f; dashed: '
       'pos)</text>' % (L + 10, lo_r, hi_r),
       '<text x="%d" y="50" fill="#d62728">SLO attainment (%.3f..%.3f; dashed: pos)</text>' % (
           L + 10, lo_s, hi_s),
       "</svg>"]
open(os.path.join(OUT, "learned-curve.svg"), "w").write("\n".join(svg) + "\n")
