#!/usr/bin/env bash
# posd's metrics endpoint under one local user's attack (simulated GPU; issue 25 part 5). A
# root posd serves --metrics on 127.0.0.1; root scrapes it every 0.25 s (curl, 5 s timeout)
# while a verifying latency client (posapp resnet18, closed loop, under the shim) runs for
# SECONDS_PER_RUN, in each of these modes, side by side and alternating over ROUNDS rounds:
#   none    no attack (the baseline)
#   idle    build/bench/metricsattack as uid 65534: 1,000 connections that send nothing, each
#           opened again 1 s after posd closes it
#   slow    the same with a partial request, a header line every 500 ms, never finished
#   sink    the control: the idle attack against a listener of its own (metricsattack sink)
#           that resets each connection at once, not posd: what the attack's traffic costs the
#           machine whoever serves it
#   flood   idle, each opened again at once (a connect loop as fast as the attacker's CPU goes:
#           not a target, shown for what it costs)
# Targets: a scrape answers within 1 s under idle and slow, and the latency client's p99
# stays within 1.1x of its baseline. Writes a section of docs/results/reliability.md: per mode
# the scrapes' median and worst latency and failures, the latency client's median p99 over the
# rounds with its range and its ratio to the baseline's, and posd's CPU time a second.
#
#   bash bench/metricsattack.sh                 (make bench-metricsattack)
#   ROUNDS=3 SECONDS_PER_RUN=4 OUT=/tmp/m.md bash bench/metricsattack.sh
#   POSD=/tmp/old-posd SECTION=metricsattack-before TITLE="... before the fix" \
#       bash bench/metricsattack.sh      (another build's posd, in a section of its own)
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_ROUNDS=5 DEFAULT_SECONDS_PER_RUN=8
ROUNDS=${ROUNDS:-$DEFAULT_ROUNDS}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-$DEFAULT_SECONDS_PER_RUN}
OUT=${OUT:-docs/results/reliability.md}
POSD=${POSD:-build/posd}
SECTION=${SECTION:-metricsattack} # the marked section of OUT this run writes
TITLE=${TITLE:-"The metrics endpoint under one user's attack (simulated GPU)"}
DEFAULT_MODES="none idle slow sink flood"
MODES=${MODES:-$DEFAULT_MODES}
CONNS=1000
APP=build/posapp SHIM=build/libposshim.so ATTACKER=build/bench/metricsattack
for f in $APP $SHIM $POSD $ATTACKER; do
    [ -x "$f" ] || { echo "bench: build first (make all build/bench/metricsattack)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "bench: needs root (the attacker runs as uid 65534)" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench: needs curl" >&2; exit 1; }
T=$(mktemp -d)
chmod 755 "$T"
# on any exit, this shell's own jobs still running (never a pid that may since be another's)
cleanup() {
    local j
    j=$(jobs -p)
    [ -n "$j" ] && kill -KILL $j 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$T"
    rm -f /dev/shm/pos-sim."$(id -u)".bench-metricsattack-$$
}
trap cleanup EXIT
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock POS_SIM_INSTANCE=bench-metricsattack-$$
: >"$T/posd.conf"
. bench/lib.sh
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port) SINK_PORT=$(free_port)
rm -f "$POS_SOCKET"
POSD_STATE_DIR=$(mktemp -d "$T/state.XXXXXX") $POSD -f -c "$T/posd.conf" --metrics "$PORT" \
    >>"$T/posd.log" 2>&1 &
POSD_PID=$!
for _ in $(seq 150); do [ -S "$POS_SOCKET" ] && break; sleep 0.02; done
[ -S "$POS_SOCKET" ] || { echo "bench: posd did not come up: $(cat "$T/posd.log")" >&2; exit 1; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$POSD_PID/stat"; }

# Root's scraper: one scrape every 0.25 s until FLAG is gone; "seconds status" per line.
scraper() { # FLAG FILE
    while [ -e "$1" ]; do
        curl -s -o /dev/null --max-time 5 -w '%{time_total} %{http_code}\n' \
            "http://127.0.0.1:$PORT/metrics" >>"$2" || true
        sleep 0.25
    done
}

run_mode() { # MODE ROUND
    local mode=$1 r=$2 p="$T/$2-$1" a= s= k= target=$PORT
    echo "bench: metricsattack round $((r + 1))/$ROUNDS, $mode..." >&2
    case $mode in
    idle) args=(idle "$CONNS" 3600 1000) ;;
    slow) args=(slow "$CONNS" 3600 1000 500) ;;
    sink) args=(idle "$CONNS" 3600 1000) target=$SINK_PORT ;;
    flood) args=(idle "$CONNS" 3600 0) ;;
    *) args=() ;;
    esac
    if [ "$mode" = sink ]; then
        $ATTACKER sink "$SINK_PORT" 3600 >"$p-sink.json" &
        k=$!
        sleep 0.2
    fi
    if [ ${#args[@]} -gt 0 ]; then
        setpriv --reuid 65534 --regid 65534 --clear-groups $ATTACKER "$target" "${args[@]}" \
            >"$p-attack.json" &
        a=$!
        sleep 1 # the attack under way: its connections open, posd's limit reached
    fi
    : >"$p-scrapes"
    touch "$p.scraping"
    scraper "$p.scraping" "$p-scrapes" &
    s=$!
    local t0 c0
    t0=$(date +%s.%N) c0=$(cpu_ticks)
    POS_APP=latency LD_PRELOAD=$SHIM $APP --model resnet18 --requests 1000000 \
        --duration "$SECONDS_PER_RUN" --verify >"$p-latency.json"
    echo "$(cpu_ticks) $c0 $(date +%s.%N) $t0 $(getconf CLK_TCK)" >"$p-cpu"
    rm -f "$p.scraping"
    wait "$s"
    if [ -n "$a" ]; then
        kill -TERM "$a"
        wait "$a" || echo "bench: the attacker failed ($mode, round $((r + 1)))" >&2
    fi
    if [ -n "$k" ]; then
        kill -TERM "$k"
        wait "$k" || echo "bench: the sink failed ($mode, round $((r + 1)))" >&2
    fi
    [ -s "$p-latency.json" ] || { echo "bench: no latency result ($mode, round $((r + 1)))" >&2; exit 1; }
    kill -0 "$POSD_PID" || { echo "bench: posd died ($mode, round $((r + 1)))" >&2; exit 1; }
}

read -r -a modes <<<"$MODES"
for ((r = 0; r < ROUNDS; r++)); do
    # rotate the order, so that no mode always runs first or after the same one
    n=${#modes[@]}
    for ((i = 0; i < n; i++)); do
        run_mode "${modes[$(((i + r) % n))]}" "$r"
    done
done
posd_down
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# what this run writes (docs/) is not a change of what it measures
[ -n "$(git status --porcelain -- . ':!docs' 2>/dev/null)" ] && rev="$rev (with uncommitted changes)"
invocation="bash bench/metricsattack.sh"
[ "$ROUNDS" != "$DEFAULT_ROUNDS" ] && invocation="ROUNDS=$ROUNDS $invocation"
[ "$SECONDS_PER_RUN" != "$DEFAULT_SECONDS_PER_RUN" ] && invocation="SECONDS_PER_RUN=$SECONDS_PER_RUN $invocation"
[ "$POSD" != build/posd ] && invocation="POSD=$POSD $invocation"
[ "$MODES" != "$DEFAULT_MODES" ] && invocation="MODES=\"$MODES\" $invocation"
[ "$SECTION" != metricsattack ] && invocation="SECTION=$SECTION TITLE=\"$TITLE\" $invocation"

python3 - "$T" "$ROUNDS" "$OUT" "$MODES" "$SECONDS_PER_RUN" "$(nproc)" "$(uname -r)" "$rev" \
    "$load_before" "$load_after" "$invocation" "$POSD" "$CONNS" "$SECTION" "$TITLE" <<'PY'
import json, statistics, sys, datetime
(T, rounds, out, modes, secs, cores, kernel, rev, load_before, load_after, invocation, posd,
 conns, section_name, title) = sys.argv[1:]
rounds, modes = int(rounds), modes.split()

def med(v):
    return statistics.median(v) if v else float("nan")

def ms(v):  # seconds as milliseconds, "-" when there is none
    return "-" if v != v else f"{v * 1000:.1f}"

rows, base = [], None
for m in modes:
    p99, scr, failed, cpu, verified, att = [], [], 0, [], True, []
    for r in range(rounds):
        p = f"{T}/{r}-{m}"
        d = json.loads(open(f"{p}-latency.json").readline())
        p99.append(d["p99_ms"])
        verified = verified and d.get("verified") is True
        for line in open(f"{p}-scrapes"):
            t, code = line.split()
            if code == "200":
                scr.append(float(t))
            else:
                failed += 1
        c1, c0, w1, w0, hz = open(f"{p}-cpu").read().split()
        cpu.append((int(c1) - int(c0)) / int(hz) / (float(w1) - float(w0)))
        try:
            att.append(json.loads(open(f"{p}-attack.json").readline()))
        except (OSError, ValueError):
            pass
    rows.append((m, p99, scr, failed, cpu, verified, att))
    if m == "none":
        base = med(p99)

what = {"none": "no attack (baseline)",
        "idle": f"{conns} idle connections of uid 65534, each reopened 1 s after posd closes it",
        "slow": f"{conns} slow requests of uid 65534 (a header line every 500 ms), each reopened 1 s after posd closes it",
        "sink": f"control: the idle attack against a listener that resets each connection, not posd",
        "flood": f"{conns} idle connections of uid 65534, each reopened at once (a connect loop)"}
lines = []
w = lines.append
w(f"<!-- {section_name}:begin (bench/metricsattack.sh writes this section) -->")
w(f"## {title}")
w("")
w(f"`{invocation}` on {datetime.date.today()}, Linux {kernel} x86_64, {cores} cores (shared with "
  f"other work), as root; posd `{posd}` at commit {rev}. Load average (1, 5, 15 min) "
  f"{load_before} before, {load_after} after.")
w("")
w(f"A root posd serves `--metrics` on 127.0.0.1; root scrapes it every 0.25 s (curl, 5 s "
  f"timeout) while a verifying latency client (posapp resnet18, closed loop, under the shim) "
  f"runs {secs} s; each mode once a round, {rounds} rounds, the order rotated each round. "
  f"Targets: under idle and slow, a scrape answers within 1 s and the latency client's p99 stays "
  f"within 1.1x of its baseline.")
w("")
w("| mode | scrapes | scrape median (ms) | worst scrape (ms) | failed | latency p99 median (ms) | p99 range (ms) | x baseline | posd CPU (ms/s) | attacker: opened / closed | verified |")
w("|---|---|---|---|---|---|---|---|---|---|---|")
for m, p99, scr, failed, cpu, verified, att in rows:
    opened = sum(a["opened"] for a in att)
    closed = sum(a["closed_by_posd"] for a in att)
    atk = f"{opened} / {closed}" if att else "-"
    ratio = f"{med(p99) / base:.2f}x" if base else "-"
    w(f"| {what[m]} | {len(scr) + failed} | {ms(med(scr))} | "
      f"{ms(max(scr) if scr else float('nan'))} | {failed} | {med(p99):.2f} | "
      f"{min(p99):.2f}-{max(p99):.2f} | {ratio} | {med(cpu) * 1000:.0f} | {atk} | "
      f"{'yes' if verified else 'NO'} |")
w(f"<!-- {section_name}:end -->")
section = "\n".join(lines) + "\n"
print(section)
try:
    text = open(out).read()
except OSError:
    text = ""
b, e = f"<!-- {section_name}:begin", f"<!-- {section_name}:end -->"
if b in text and e in text:
    text = text[:text.index(b)] + section + text[text.index(e) + len(e) + 1:]
else:
    text += ("\n" if text and not text.endswith("\n") else "") + "\n" + section
open(out, "w").write(text)
PY
