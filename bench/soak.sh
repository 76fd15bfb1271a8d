#!/usr/bin/env bash
# The fault suite's long form (simulated GPU): 8 client slots of every shape (streams, threads,
# the per-thread default stream, a capped class, latency and batch classes), each running
# verifying posapp jobs of a few seconds back to back (churn), while faults come in turn every
# FAULT_S seconds: posd killed (-9) and restarted, posd stopped for 2 s, a client stopped for
# 1 s, a client killed (-9), and a hostile client case (tests/integration/hostile.c, as uid
# 65534 when run as root). Every SAMPLE_S seconds it samples posd's RSS, descriptors and
# launch counters, and the jobs' launches and errors so far. A job's error: it failed, did not
# verify, or made other than requests x 31 launches. Writes the table into the soak section of
# docs/results/reliability.md (between its soak markers), with the command and the machine.
#
#   make soak SOAK_MINUTES=30     (bash bench/soak.sh; SOAK_MINUTES=3 for a short one)
#   OUT=/tmp/r.md SOAK_MINUTES=1 bash bench/soak.sh
# SOAK_FAULTS: the faults taken in turn (default all: posd-kill posd-stop client-stop
# client-kill hostile); without posd-kill one posd lives the whole soak, so that its RSS and
# descriptors over time show a leak. SOAK_POLICY: posd's policy (default pos, posd's default).
# SOAK_SECTION: the name of the markers of the section it writes (default soak).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${SOAK_MINUTES:-30}
FAULT_S=${FAULT_S:-20}
SAMPLE_S=${SAMPLE_S:-15}
POLICY=${SOAK_POLICY:-pos}
SECTION=${SOAK_SECTION:-soak}
read -r -a faults <<<"${SOAK_FAULTS:-posd-kill posd-stop client-stop client-kill hostile}"
for f in "${faults[@]}"; do
    case $f in posd-kill | posd-stop | client-stop | client-kill | hostile) ;;
    *) echo "soak: unknown fault '$f' in SOAK_FAULTS (posd-kill posd-stop client-stop client-kill hostile)" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-docs/results/reliability.md}
T=$(mktemp -d /tmp/pos-soak.XXXXXX)
chmod 711 "$T"
APP=build/posapp SHIM=build/libposshim.so POSD=build/posd POSSTAT=build/posstat
HOSTILE=build/tests/hostile
for f in $APP $SHIM $POSD $POSSTAT $HOSTILE; do
    [ -e "$f" ] || { echo "soak: build first (make all build/tests/hostile)" >&2; exit 1; }
done
export LD_LIBRARY_PATH=build/sim POS_SOCKET=$T/posd.sock POS_SIM_INSTANCE=soak-$$
install -m 0755 $HOSTILE "$T/hostile"
printf '[rule %s]\nmatch_app = %s*\nclass = batch\n' batch-jobs batch capped capped >"$T/posd.conf"
echo "max_inflight = 1" >>"$T/posd.conf" # the capped rule, last

. bench/lib.sh
SLOT_PIDS=()
cleanup() {
    for p in "${SLOT_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -n "$POSD_PID" ] && kill -CONT "$POSD_PID" 2>/dev/null || true
    posd_down
    wait 2>/dev/null || true
    rm -rf "$T" "/dev/shm/pos-sim.$(id -u).$POS_SIM_INSTANCE"
}
trap cleanup EXIT

# one client slot: jobs back to back until $T/stop exists; each job's JSON line in its log
slot() { # index app args...
    local i=$1 app=$2
    shift 2
    local n=0
    while [ ! -e "$T/stop" ]; do
        n=$((n + 1))
        POS_APP=$app LD_PRELOAD=$SHIM $APP --model resnet18 --verify --duration "$((2 + i % 4))" \
            --requests 100000 --seed "$n" "$@" >"$T/job.$i" 2>/dev/null &
        local p=$! rc=0
        echo "$p" >"$T/pid.$i"
        wait "$p" || rc=$?
        local out
        out=$(tail -n 1 "$T/job.$i")
        # a job the soak killed on purpose is no error
        if [ -e "$T/killed.$i" ]; then
            rm -f "$T/killed.$i"
            if [ "$rc" -ne 0 ]; then
                echo "killed" >>"$T/slot.$i"
                continue
            fi
        fi
        local req launches verified
        req=$(sed -n 's/.*"requests":\([0-9]*\).*/\1/p' <<<"$out")
        launches=$(sed -n 's/.*"launches":\([0-9]*\).*/\1/p' <<<"$out")
        verified=$(grep -c '"verified":true' <<<"$out" || true)
        if [ "$rc" -eq 0 ] && [ "$verified" = 1 ] && [ -n "$req" ] && [ "$launches" = $((req * 31)) ]; then
            echo "ok $launches" >>"$T/slot.$i"
        else
            echo "error rc=$rc $out" >>"$T/slot.$i"
        fi
    done
}

shapes=("app" "app-streams --streams 4" "batch-threads --threads 4" "app-ptds --ptds"
        "batch-mixed --threads 2 --streams 2" "capped-ptds --threads 3 --ptds" "capped" "batch --threads 2")
posd_up "$POLICY"
for i in "${!shapes[@]}"; do
    # shellcheck disable=SC2086
    slot "$i" ${shapes[$i]} &
    SLOT_PIDS+=($!)
done

posd_rss() { awk '/^VmRSS:/ {print $2}' "/proc/$POSD_PID/status" 2>/dev/null || echo -; }
posd_fds() { ls "/proc/$POSD_PID/fd" 2>/dev/null | wc -l; }
posd_counts() { # "submitted completed clients" of the posd running now ("-" when it does not answer)
    local js dev
    js=$($POSSTAT -o json 2>/dev/null || true)
    dev=$(sed -n 's/.*"device":{\([^}]*\)}.*/\1/p' <<<"$js")
    printf '%s %s %s' "$(sed -n 's/.*"submitted":\([0-9]*\).*/\1/p' <<<"$dev" | grep . || echo -)" \
        "$(sed -n 's/.*"completed":\([0-9]*\).*/\1/p' <<<"$dev" | grep . || echo -)" \
        "$(sed -n 's/.*"clients":\([0-9]*\).*/\1/p' <<<"$dev" | grep . || echo -)"
}
jobs_so_far() { # "jobs launches errors killed"
    cat "$T"/slot.* 2>/dev/null | awk '$1 == "ok" {j++; l += $2} $1 == "error" {e++} $1 == "killed" {k++}
        END {printf "%d %d %d %d", j, l, e, k}'
}
run_as() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }

hostile_cases=($($HOSTILE --list))
declare -A done_faults=()
samples="$T/samples"
start=$(date +%s)
end=$((start + MINUTES * 60))
next_fault=$((start + FAULT_S))
next_sample=$start
nf=0
restarts=0
echo "soak: $MINUTES min, 8 client slots, a fault every $FAULT_S s" >&2
while [ "$(date +%s)" -lt "$end" ]; do
    now=$(date +%s)
    if [ "$now" -ge "$next_sample" ]; then
        read -r sub comp ncl <<<"$(posd_counts)"
        read -r jobs launches errors killed <<<"$(jobs_so_far)"
        printf '%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $((now - start)) "$(posd_rss)" "$(posd_fds)" \
            "${ncl:--}" "${sub:--}" "${comp:--}" "$jobs" "$launches" "$errors" "$restarts" >>"$samples"
        next_sample=$((now + SAMPLE_S))
    fi
    if [ "$now" -ge "$next_fault" ]; then
        f=${faults[$((nf % ${#faults[@]}))]}
        case $f in
        posd-kill)
            posd_down -KILL
            posd_up "$POLICY"
            restarts=$((restarts + 1))
            ;;
        posd-stop)
            kill -STOP "$POSD_PID"
            sleep 2
            kill -CONT "$POSD_PID"
            ;;
        client-stop | client-kill)
            i=$(((nf / ${#faults[@]}) % 8))
            p=$(cat "$T/pid.$i" 2>/dev/null || true)
            if [ -n "$p" ]; then
                if [ $f = client-stop ]; then
                    kill -STOP "$p"
                    sleep 1
                    kill -CONT "$p"
                else
                    touch "$T/killed.$i"
                    kill -KILL "$p"
                fi
            fi
            ;;
        hostile)
            c=${hostile_cases[$(((nf / ${#faults[@]}) % ${#hostile_cases[@]}))]}
            f="hostile $c"
            run_as "$T/hostile" "$POS_SOCKET" "$c" 2 "$nf" >/dev/null 2>&1 || echo "soak: hostile $c exited $?" >&2
            ;;
        esac
        done_faults[$f]=$((${done_faults[$f]:-0} + 1))
        nf=$((nf + 1))
        next_fault=$(($(date +%s) + FAULT_S))
    fi
    sleep 1
done
touch "$T/stop"
for p in "${SLOT_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
SLOT_PIDS=()
read -r jobs launches errors killed <<<"$(jobs_so_far)"
alive=$(kill -0 "$POSD_PID" 2>/dev/null && echo yes || echo no)
now=$(date +%s)
read -r sub comp ncl <<<"$(posd_counts)"
printf '%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $((now - start)) "$(posd_rss)" "$(posd_fds)" \
    "${ncl:--}" "${sub:--}" "${comp:--}" "$jobs" "$launches" "$errors" "$restarts" >>"$samples"

{
    echo "<!-- $SECTION:begin (bench/soak.sh writes this section) -->"
    echo "## Soak: $MINUTES minutes, 8 client slots, churn and faults${SOAK_TITLE:+, $SOAK_TITLE} (simulated GPU)"
    echo
    echo "\`SOAK_MINUTES=$MINUTES SAMPLE_S=$SAMPLE_S SOAK_FAULTS=\"${faults[*]}\" make soak\` (posd policy $POLICY) on $(date -u +%Y-%m-%d), $(uname -srm), $(nproc) cores"
    echo "(shared with other work: a loaded machine), as $(id -un)."
    echo
    echo "Jobs: **$jobs** verifying posapp jobs finished, **$launches** launches checked, **$errors**"
    echo "errors (failed, unverified or a launch count other than requests x 31); $killed jobs"
    echo "killed on purpose (not counted). posd alive at the end: **$alive**."
    echo
    printf 'Faults injected:'
    for k in "${!done_faults[@]}"; do printf ' %s x%s,\n' "$k" "${done_faults[$k]}"; done | sort | tr -d '\n' | sed 's/,$//'
    echo "."
    echo
    echo "Samples every $SAMPLE_S s. posd's counters and RSS start again at each posd-kill restart"
    echo "(the restarts column); jobs, launches and errors are cumulative."
    echo
    echo "| t (s) | posd RSS (KiB) | posd fds | clients | posd submitted | posd completed | jobs | launches checked | errors | posd restarts |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' "$samples"
    echo "<!-- $SECTION:end -->"
} >"$T/section.md"
if [ -f "$OUT" ] && grep -q "<!-- $SECTION:begin" "$OUT"; then
    awk -v sec="$T/section.md" -v b="<!-- $SECTION:begin" -v e="<!-- $SECTION:end -->" \
        'index($0, b) == 1 {while ((getline l < sec) > 0) print l; skip = 1; next}
        index($0, e) == 1 {skip = 0; next} !skip' "$OUT" >"$T/out.md"
    cat "$T/out.md" >"$OUT"
else
    cat "$T/section.md" >>"$OUT"
fi
echo "soak: $jobs jobs, $launches launches checked, $errors errors, posd alive: $alive ($OUT)" >&2
[ "$errors" -eq 0 ] && [ "$alive" = yes ]
