#!/usr/bin/python3
"""The mixes of bench/learned.sh (docs/learned.md): possim scenarios for training policy learned
and the held-out ones it is judged on, named here before any training. Usage:
    learned_mixes.py OUTDIR [--requests N]
writes OUTDIR/train/*.ini, OUTDIR/train.curriculum, OUTDIR/test/*.ini and OUTDIR/test.list
(one line a held-out row: family, name, file).

Training: devices rtx3080 and orin-agx (MPS) and xavier-nx (time-sliced); latency models
resnet18, mobilenet_v2, inception_v3; batch models resnet50, bert_base, mobilenet_v1; Poisson
arrivals at 50, 70 and 90% load; churn (batch clients that come and go) at 70%.
Held out (never seen in training): device h200 (MPS); latency models resnet34, mobilenet_v3,
inception_v1; batch models yolop, inception_v1, mobilenet_v3, resnet34; loads 60 and 80%;
Gamma arrivals (shape 0.25: a coefficient of variation of 2, bursts) as well as Poisson; churn
at 60%.

Load: the latency client's arrival rate times its solo mean request time on the device (possim,
one client alone, batch 1): the share of the device it would need alone. Its SLO is 1.5x the
p99 latency it has alone with those arrivals (possim, the same seed): what isolation would
give it, with some room. Batch clients run closed loops of enough requests to outlast the latency client.
"""
import json
import os
import subprocess
import sys
import tempfile

POSSIM = os.environ.get("POSSIM", "build/possim")

# possim's solo mean request time, ms (one client alone, batch 1; measured at commit 7fea3f8:
# `possim` on "[client a] model = M, requests = 60" per preset)
SOLO = {
    "rtx3080": {"resnet18": 1.034, "resnet34": 2.487, "resnet50": 2.222, "mobilenet_v1": 0.438,
                "mobilenet_v2": 0.534, "mobilenet_v3": 0.868, "inception_v1": 1.162,
                "inception_v3": 3.334, "bert_base": 5.386, "yolop": 3.264},
    "orin-agx": {"resnet18": 1.643, "resnet34": 3.696, "resnet50": 3.499, "mobilenet_v1": 0.688,
                 "mobilenet_v2": 0.702, "mobilenet_v3": 0.891, "inception_v1": 1.843,
                 "inception_v3": 5.250, "bert_base": 9.160, "yolop": 6.498},
    "xavier-nx": {"resnet18": 5.628, "resnet34": 11.744, "resnet50": 12.425,
                  "mobilenet_v1": 2.457, "mobilenet_v2": 1.933, "mobilenet_v3": 2.028,
                  "inception_v1": 5.668, "inception_v3": 15.959, "bert_base": 28.203,
                  "yolop": 28.573},
    "h200": {"resnet18": 0.886, "resnet34": 2.130, "resnet50": 1.878, "mobilenet_v1": 0.356,
             "mobilenet_v2": 0.506, "mobilenet_v3": 0.770, "inception_v1": 0.995,
             "inception_v3": 2.806, "bert_base": 4.603, "yolop": 2.561},
}


def alone_p99(head, latency):
    """possim's p99 of the latency client alone (the scenario's device, arrivals and seed)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
        f.write("\n".join(head + latency) + "\n")
    try:
        out = subprocess.run([POSSIM, "-o", "json", f.name], check=True, capture_output=True,
                             text=True).stdout
    finally:
        os.unlink(f.name)
    return json.loads(out)["clients"][0]["p99_ms"]


def scenario(dev, lat, batch, load, arrival="poisson", requests=300, churn=False, seed=1):
    mode = "timeslice" if dev == "xavier-nx" else "mps"
    solo = SOLO[dev][lat]
    rate = load * 1000.0 / solo
    span_ms = requests / rate * 1000.0
    arr = "poisson:%.3f" % rate if arrival == "poisson" else "gamma:0.25:%.3f" % rate
    head = ["; %s: %s at %.0f%% load (%s), beside %s%s" % (
        dev, lat, 100 * load, arrival, "+".join(batch), ", churning" if churn else ""),
        "[device]", "preset = %s" % dev, "mode = %s" % mode, "", "[sched]",
        "policy = pos", ""]
    latency = ["[client latency]", "model = %s" % lat, "requests = %d" % requests,
               "arrival = %s" % arr, "class_priority = 10", "seed = %d" % seed]
    slo = 1.5 * alone_p99(head, latency)
    out = head + latency + ["slo_ms = %.3f" % slo, ""]
    for i, b in enumerate(batch):
        if churn:
            # each batch client comes and goes: four lives a client, staggered
            for life in range(4):
                start = (life + i / len(batch)) * span_ms / 4
                n = max(2, int(span_ms / 16 / SOLO[dev][b]))
                out += ["[client batch%d-%d]" % (i, life), "model = %s" % b,
                        "requests = %d" % n, "class_priority = 20",
                        "start_ms = %.1f" % start, "stop_with = latency", ""]
        else:
            n = max(4, int(span_ms * 1.2 / SOLO[dev][b] / len(batch)))
            out += ["[client batch%d]" % i, "model = %s" % b, "requests = %d" % n,
                    "class_priority = 20", "stop_with = latency", ""]
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: learned_mixes.py OUTDIR [--requests N]")
    outdir = sys.argv[1]
    requests = 300
    if "--requests" in sys.argv:
        requests = int(sys.argv[sys.argv.index("--requests") + 1])
    os.makedirs(outdir + "/train", exist_ok=True)
    os.makedirs(outdir + "/test", exist_ok=True)

    train = []
    for dev, lat, batch in [("rtx3080", "resnet18", ["resnet50", "bert_base"]),
                            ("orin-agx", "mobilenet_v2", ["resnet50", "mobilenet_v1"]),
                            ("xavier-nx", "inception_v3", ["bert_base", "mobilenet_v1"])]:
        for load in (0.5, 0.7, 0.9):
            train.append(("%s-%s-p%d" % (dev, lat, load * 100),
                          scenario(dev, lat, batch, load, requests=requests)))
        train.append(("%s-%s-churn70" % (dev, lat),
                      scenario(dev, lat, batch, 0.7, requests=requests, churn=True)))
    with open(outdir + "/train.curriculum", "w") as f:
        f.write("; policy learned's training mixes (bench/learned_mixes.py)\n[train]\n")
        for name, text in train:
            open("%s/train/%s.ini" % (outdir, name), "w").write(text)
        for name, _ in train:
            f.write("\n[mix %s]\nscenario = train/%s.ini\n" % (name, name))

    rows = []
    for lat, batch in [("resnet34", ["yolop", "inception_v1"]),
                       ("mobilenet_v3", ["resnet34", "yolop"]),
                       ("inception_v1", ["mobilenet_v3", "resnet34"])]:
        for arrival in ("poisson", "gamma"):
            for load in (0.6, 0.8):
                fam = "%s %d%%" % (arrival, load * 100)
                rows.append((fam, "h200-%s-%s%d" % (lat, arrival[0], load * 100),
                             scenario("h200", lat, batch, load, arrival, requests=requests)))
        rows.append(("churn 60%", "h200-%s-churn60" % lat,
                     scenario("h200", lat, batch, 0.6, requests=requests, churn=True)))
    with open(outdir + "/test.list", "w") as f:
        for fam, name, text in rows:
            path = "%s/test/%s.ini" % (outdir, name)
            open(path, "w").write(text)
            f.write("%s\t%s\t%s\n" % (fam, name, path))


main()
