#!/usr/bin/env bash
# Whether posd's profile saves stall scheduling: a client that waits for each grant
# (build/bench/savegrant, one request a millisecond) beside a posd holding 200,000 kernel
# profiles, while `posctl profiles save` is asked every 0.6 s. Its grant waits that overlap a
# save against those far from any, p99 each, in the same run; for this build's posd and, with
# BASELINE (a build folder of an older commit: posd, posctl), for that one too, rounds
# alternating. Medians over the rounds and their range. Simulated GPU (the probe launches
# nothing on it), real posd, real posctl. Writes docs/results/saves.md.
#
#   make bench-saves [BASELINE=/tmp/old/build]
#   ROUNDS=3 SAVES=8 OUT=/tmp/s.md BASELINE=... bash bench/saves.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SAVES=${SAVES:-8}
PROFILES=${PROFILES:-200000}
OUT=${OUT:-docs/results/saves.md}
BASELINE=${BASELINE:-}
BASELINE_LABEL=${BASELINE_LABEL:-$BASELINE}
[ -x build/posd ] && [ -x build/bench/savegrant ] || {
    echo "bench-saves: build first (make all build/bench/savegrant)" >&2
    exit 1
}
if [ -n "$BASELINE" ] && ! { [ -x "$BASELINE/posd" ] && [ -x "$BASELINE/posctl" ]; }; then
    echo "bench-saves: BASELINE=DIR, a build folder with posd and posctl" >&2
    exit 2
fi
T=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"' EXIT
/usr/bin/python3 - "$T" "$ROUNDS" "$SAVES" "$PROFILES" "$OUT" "$BASELINE" "$BASELINE_LABEL" \
    "$(git rev-parse --short HEAD)" <<'PY'
import os, statistics, subprocess, sys, time
T, rounds, saves, nprof, out, base, blabel, head = sys.argv[1:9]
rounds, saves, nprof = int(rounds), int(saves), int(nprof)
builds = [("this build (%s)" % head, "build")]
if base:
    builds.insert(0, (blabel, base))
big = os.path.join(T, "big.profiles")
with open(big, "w") as f:
    f.write("pos-profiles 1\ndevice sms 0\n")
    for i in range(1, nprof + 1):  # over 8 uids: each under profile_user_max
        f.write("k %d %016x %d,1,1 128,1,1 10 %d.0 1.0 10 0 1.0000\n"
                % (1000 + i % 8, i, i % 64 + 1, 1000 + i % 500))
    f.write("end %d\n" % nprof)
conf = os.path.join(T, "posd.conf")
open(conf, "w").write("[daemon]\nlog_level = info\n")
load0 = open("/proc/loadavg").read().split()[:3]

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")

def one(label, d, r):
    sock = os.path.join(T, "posd-%d.sock" % r)
    state = os.path.join(T, "state-%s-%d" % (os.path.basename(d), r))
    env = dict(os.environ, POSD_STATE_DIR=state, POS_SIM_INSTANCE="bench-saves-%d-%d" % (os.getpid(), r))
    log = open(os.path.join(T, "posd.log"), "a")
    posd = subprocess.Popen([d + "/posd", "-f", "-c", conf, "-s", sock], env=env, stderr=log)
    for _ in range(300):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    try:
        return measure(d, sock, posd, r)
    finally:
        if posd.poll() is None:
            posd.kill()
            posd.wait()

def measure(d, sock, posd, r):
    ctl = lambda *a: subprocess.run([d + "/posctl", "-s", sock] + list(a), capture_output=True,
                                    text=True)
    res = ctl("profiles", "load", big)
    if res.returncode != 0 or ("%d kernel profiles now" % nprof) not in res.stdout:
        sys.exit("bench-saves: load failed: " + res.stdout + res.stderr)
    samples = os.path.join(T, "grants-%d.txt" % r)
    secs = 1.0 + saves * 0.6 + 1.0
    probe = subprocess.Popen(["build/bench/savegrant", sock, str(secs), "1000", samples])
    try:
        windows = save_rounds(ctl)
    finally:
        if probe.poll() is None and sys.exc_info()[0]:
            probe.kill()
        probe.wait()
    posd.terminate()
    posd.wait()
    return summary(samples, windows)

def save_rounds(ctl):
    time.sleep(1.0)
    windows = []
    for _ in range(saves):
        t0 = time.monotonic()
        res = ctl("profiles", "save")
        t1 = time.monotonic()
        if res.returncode != 0 or ("%d kernel profiles saved" % nprof) not in res.stdout:
            sys.exit("bench-saves: save failed: " + res.stdout + res.stderr)
        windows.append((t0, t1))
        time.sleep(max(0.0, 0.6 - (t1 - t0)))
    return windows

def summary(samples, windows):
    during, quiet, lost = [], [], 0
    for line in open(samples):
        s, w = map(float, line.split())
        if w < 0:
            lost += 1
            continue
        e = s + w
        if any(s <= b and e >= a for a, b in windows):
            during.append(w)
        elif all(e < a - 0.05 or s > b + 0.05 for a, b in windows):
            quiet.append(w)
    return dict(save=statistics.median(b - a for a, b in windows), p99d=pct(during, 0.99),
                p99q=pct(quiet, 0.99), maxd=max(during) if during else float("nan"),
                nd=len(during), nq=len(quiet), lost=lost)

res = {d: [] for _, d in builds}
for r in range(rounds):
    for label, d in builds:
        print("bench-saves: round %d of %d, %s..." % (r + 1, rounds, label), file=sys.stderr)
        res[d].append(one(label, d, r))
load1 = open("/proc/loadavg").read().split()[:3]

def cell(v, fmt):
    m = statistics.median(v)
    return (fmt % m) + " (" + (fmt % min(v)) + "-" + (fmt % max(v)) + ")"

cmd = "make bench-saves" + (" BASELINE=%s" % base if base else "")
uname = os.uname()
lines = [
    "# Profile saves beside scheduling",
    "",
    "Whether posd's saves of its kernel profiles stall scheduling (issue 25, part 4). A client",
    "that waits for each grant (`bench/savegrant.c`: a kernel submitted, posd kicked, a spin",
    "until posd grants it; one request a millisecond) runs beside a posd holding %d kernel" % nprof,
    "profiles while `posctl profiles save` is asked every 0.6 s (%d saves a round). Its grant" % saves,
    "waits that overlap a save are set against those more than 50 ms from any, p99 each, in the",
    "same round; rounds alternate between the builds. Medians over %d rounds, range in" % rounds,
    "brackets. Simulated GPU (the probe launches nothing on it); real posd and posctl.",
    "",
    "Command: `%s`. Machine: %s %s, %d cores, load %s before and %s after; %s." % (
        cmd, uname.sysname, uname.release, os.cpu_count(), " ".join(load0), " ".join(load1),
        time.strftime("%Y-%m-%d")),
    "",
    "| posd | save (ms, as posctl waits) | grant p99 beside a save (us) | grant p99 away from saves (us) | ratio | longest wait beside a save (ms) | samples beside / away | lost |",
    "|---|---|---|---|---|---|---|---|",
]
for label, d in builds:
    v = res[d]
    lines.append("| %s | %s | %s | %s | %s | %s | %d / %d | %d |" % (
        label, cell([x["save"] * 1e3 for x in v], "%.0f"),
        cell([x["p99d"] * 1e6 for x in v], "%.0f"), cell([x["p99q"] * 1e6 for x in v], "%.0f"),
        cell([x["p99d"] / x["p99q"] for x in v], "%.2f"),
        cell([x["maxd"] * 1e3 for x in v], "%.1f"),
        sum(x["nd"] for x in v), sum(x["nq"] for x in v), sum(x["lost"] for x in v)))
lines += [
    "",
    "Target: during a save of 200k profiles the grant wait p99 within 1.2x of its baseline",
    "(the `ratio` column).",
    "",
]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
