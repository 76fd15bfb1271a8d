#!/bin/bash
# Kubernetes parts end to end (simulated GPU, h200 with MPS): issue 21's targets.
#   1. A pod behaves as a process: the same latency client (resnet18, Poisson, SLO) beside a batch
#      closed loop (resnet50, batch 8) as plain processes, in podman containers given the CDI
#      device pos.dev/gpu=gpu0 (posctl cdi --driver-dir build/sim), and as processes in
#      kubepods-like cgroups named by fake kubelet log directories (rules by namespace), the
#      three alternated in each round, under posd -p pos and -p priority.
#   2. posd restart: kill -9 posd under two running containers and start it again: the time from
#      posd's exec to each client's registration (posd's log, CLOCK_MONOTONIC), and whether the
#      latency client's requests went on while posd was away (its p99 and request count).
#   3. Kubelet restart: the device plugin's re-registration time after the fake kubelet
#      (tests/kube/fake_kubelet.py) removes the plugin's socket and makes kubelet.sock again.
#   4. One ConfigMap: a policy directory (ConfigMap layout, "..data" link) giving namespace prod
#      an SLO class, team-a sm_share 60 and team-b sm_share 30, against no policy and against
#      equal MPS slices (sm_share 33 each, what NVIDIA's plugin's MPS sharing gives 3 replicas).
# Writes docs/results/kubernetes.md. Needs root (cgroups, mknod, podman), podman and unshare for
# the container parts (skipped with the reason otherwise), /usr/bin/python3 with grpcio for 3.
#
#   bash bench/kube.sh                                  (make bench-kube runs it)
#   REPS=1 RESTARTS=2 KUBELET_N=3 PARTS="1 4" OUT=/tmp/k.md bash bench/kube.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
RESTARTS=${RESTARTS:-5}       # posd restarts (part 2)
KUBELET_N=${KUBELET_N:-20}    # kubelet restarts (part 3)
PARTS=${PARTS:-1 2 3 4}
OUT=${OUT:-docs/results/kubernetes.md}
LAT_RATE=${LAT_RATE:-100} LAT_N=${LAT_N:-400} SLO=${SLO:-3}
APP=build/posapp SHIM=build/libposshim.so POSD=build/posd POSCTL=build/posctl PLUGIN=build/pos-device-plugin
for f in $APP $SHIM $POSD $POSCTL $PLUGIN build/sim/libcuda.so.1; do
    [ -e "$f" ] || { echo "bench-kube: build first (make)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "bench-kube: skipped: needs root (cgroups, mknod, podman)" >&2; exit 0; }
ROOT=$(pwd)
T=$(mktemp -d /tmp/bench-kube.XXXXXX)
CG=/sys/fs/cgroup/unified
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] && CG=/sys/fs/cgroup
export LD_LIBRARY_PATH=$ROOT/build/sim POS_SOCKET=$T/run/posd.sock
export POS_SIM_DEVICE=h200 POS_SIM_MODE=mps POS_SIM_INSTANCE=bench-kube-$$
mkdir -p "$T/run" "$T/pods" "$T/containers" "$T/o" "$T/state"
POSD_PID= FAKE_PID= PLUGIN_PID=
CG_MADE=()   # cgroups this run made, deepest last
cleanup() {
    set +e
    [ -n "$PLUGIN_PID" ] && kill -9 "$PLUGIN_PID" 2>/dev/null
    [ -n "$FAKE_PID" ] && kill "$FAKE_PID" 2>/dev/null
    [ -n "$POSD_PID" ] && kill "$POSD_PID" 2>/dev/null
    [ -e "$T/ctr.pids" ] && xargs -r kill -9 <"$T/ctr.pids" 2>/dev/null
    [ -e "$T/ctr.pids" ] && sleep 1
    [ -e "$T/rootfs" ] && in_ns "${PODMAN[@]}" rm -f -a -t 0 >/dev/null 2>&1
    jobs -p | xargs -r kill 2>/dev/null
    wait 2>/dev/null
    for ((i = ${#CG_MADE[@]} - 1; i >= 0; i--)); do
        for _ in $(seq 50); do rmdir "${CG_MADE[$i]}" 2>/dev/null && break; [ -d "${CG_MADE[$i]}" ] || break; sleep 0.02; done
    done
    rm -rf "$T"
    rm -f /dev/shm/pos-sim."$(id -u)".bench-kube-*$$*
}
trap cleanup EXIT

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | head -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "null"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
maxof() { sort -g | tail -1; }
fmt() { awk -v v="$1" 'BEGIN {if (v == "null" || v == "") print "-"; else if (v + 0 >= 100) printf "%.0f", v; else if (v + 0 >= 1) printf "%.2f", v; else printf "%.3f", v}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "null" || b == "null" || a == "" || b == "" || b == 0) print "-"; else printf "%.3f", a / b}'; }
mono() { awk '{print $1}' /proc/uptime; }   # only for waits; timings use posd's log clock
now_ns() { date +%s%N; }

# ---- posd ----------------------------------------------------------------------------------
# posd.conf: pod identity on the fake kubelet files of $T; EXTRA (rules) appended.
posd_conf() { # policy_dir extra
    printf '[daemon]\nlog_level = info\npolicy_dir = %s\n[kubernetes]\nenable = yes\nlog_dir = %s/pods\ncontainers_log_dir = %s/containers\npod_resources_socket = %s/no-kubelet.sock\ncheckpoint = %s/no-checkpoint\nrefresh_s = 0.2\n%s' \
        "$1" "$T" "$T" "$T" "$T" "$2" >"$T/posd.conf"
}
# posd -p POLICY on $POS_SOCKET; its log appended to $T/posd.log, and the CLOCK_MONOTONIC time
# of its exec (posd's log clock) in POSD_T0. STATE: a state directory kept across restarts.
posd_start() { # policy state-dir
    local t0f=$T/posd.t0
    rm -f "$POS_SOCKET" "$t0f"
    POSD_STATE_DIR=$2 /usr/bin/python3 -c 'import os, sys, time
open(sys.argv[1], "w").write("%.6f\n" % time.clock_gettime(time.CLOCK_MONOTONIC))
os.execv(sys.argv[2], sys.argv[2:])' "$t0f" "$POSD" -f -c "$T/posd.conf" -p "$1" >>"$T/posd.log" 2>&1 &
    POSD_PID=$!
    for _ in $(seq 250); do [ -S "$POS_SOCKET" ] && [ -s "$t0f" ] && break; sleep 0.02; done
    [ -S "$POS_SOCKET" ] || { echo "bench-kube: posd did not come up (log: $T/posd.log)" >&2; exit 1; }
    POSD_T0=$(cat "$t0f")
}
posd_stop() { # [-SIGNAL]
    kill "${1:--TERM}" "$POSD_PID" 2>/dev/null || true
    wait "$POSD_PID" 2>/dev/null || true
    POSD_PID=
}
# posd's client id of PID, waiting up to 10 s for it to register
client_id() {
    local id
    for _ in $(seq 500); do
        id=$($POSCTL list 2>/dev/null | awk -v p="$1" '$2 == p {print $1}')
        [ -n "$id" ] && { echo "$id"; return; }
        sleep 0.02
    done
    echo "bench-kube: pid $1 did not register with posd" >&2
    return 1
}
completed() { $POSCTL show "$1" 2>/dev/null | awk '$1 == "completed" {print $2}'; }

# ---- kubepods-like cgroups and the kubelet's log directories ---------------------------------
PODN=0
# A pod NS/POD with container CTR: its log directory and container link, its cgroup (cgroup v2,
# the systemd driver's names, containerd); its cgroup.procs path in POD_PROCS.
make_pod() { # ns pod container
    PODN=$((PODN + 1))
    local uid cid rel d p
    uid=$(printf '%08x-%04x-4000-8000-%012x' "$$" "$PODN" "$RANDOM$RANDOM")
    cid=$(printf '%08x%056x' "$$" "$PODN$RANDOM")
    d=$T/pods/${1}_${2}_$uid/$3
    mkdir -p "$d" && touch "$d/0.log" && ln -sf "$d/0.log" "$T/containers/${2}_${1}_${3}-$cid.log"
    rel=kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${uid//-/_}.slice/cri-containerd-$cid.scope
    p=$CG
    for part in ${rel//\// }; do
        p=$p/$part
        if [ ! -d "$p" ]; then mkdir "$p"; CG_MADE+=("$p"); fi
    done
    POD_PROCS=$p/cgroup.procs
}
# Runs ARGS... (posapp under the shim) in the cgroup of PROCS, stdout to OUT, in the background;
# the pid in BGPID
in_pod() { # procs out args...
    local procs=$1 out=$2
    shift 2
    sh -c 'echo $$ >"$0" && LD_PRELOAD=$1 && export LD_PRELOAD && shift && exec "$@"' "$procs" "$SHIM" "$@" >"$out" &
    BGPID=$!
}

# ---- podman ----------------------------------------------------------------------------------
# As tests/integration/test_posctl_cdi.c: a private mount namespace whose /run is a fresh tmpfs
# with our spec in /run/cdi (podman 4.3 reads /etc/cdi and /var/run/cdi only), the hybrid
# layout's cgroup2 mount removed there (crun refuses a hybrid layout with controllers on it),
# lower rlimits (root here lacks CAP_SYS_RESOURCE), storage of our own.
in_ns() { # command...
    unshare -m --propagation private sh -c 'set -e
        if [ "$(stat -f -c %T /sys/fs/cgroup)" = tmpfs ] && mountpoint -q /sys/fs/cgroup/unified; then umount /sys/fs/cgroup/unified; fi
        mount -t tmpfs tmpfs /run; mkdir /run/cdi; [ ! -e "$0/pos.json" ] || cp "$0/pos.json" /run/cdi/pos.json
        exec "$@"' "$T" "$@"
}
PODMAN=(podman --root "$T/storage" --runroot "$T/runroot" --tmpdir "$T/ptmp" --cgroup-manager cgroupfs)
# A container NAME running posapp ARGS... with the CDI device, stdout to OUT, in the background
in_ctr() { # name out args...
    local name=$1 out=$2
    shift 2
    in_ns "${PODMAN[@]}" run --rm --name "$name" --network none --pid host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
        --env POS_SIM_INSTANCE="$POS_SIM_INSTANCE" --env POS_SIM_DEVICE=h200 --env POS_SIM_MODE=mps \
        --env POS_APP="$name" --device pos.dev/gpu=gpu0 --rootfs "$T/rootfs" /bin/posapp "$@" >"$out" 2>"$out.err" &
    BGPID=$!
}
# The host pid of the posapp in container NAME (waiting up to 20 s)
ctr_pid() {
    local p
    for _ in $(seq 1000); do
        p=$(pgrep -f -x "/bin/posapp .*" -P "$(pgrep -f "conmon .*-n $1 " | head -1)" 2>/dev/null | head -1 || true)
        [ -n "$p" ] && { echo "$p" >>"$T/ctr.pids"; echo "$p"; return; }
        sleep 0.02
    done
    echo "bench-kube: container $1 did not start (see $T/o)" >&2
    return 1
}
PODMAN_WHY=
podman_setup() {
    command -v podman >/dev/null || { PODMAN_WHY="podman is not installed (scripts/deps.sh --podman)"; return 1; }
    command -v unshare >/dev/null || { PODMAN_WHY="no unshare(1)"; return 1; }
    local R=$T/rootfs l
    mkdir -p "$R/bin" "$R/models" "$R/proc" "$R/sys" "$R/dev" "$R/tmp" "$R/etc" "$T/storage" "$T/runroot" "$T/ptmp"
    cp $APP /bin/true "$R/bin/" && cp sim/models/*.model "$R/models/"
    for f in $APP $SHIM build/sim/libcuda.so.1 build/sim/pos-sim-device; do ldd "$f"; done |
        awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | grep -v "^$ROOT/" |
        while read -r l; do mkdir -p "$R$(dirname "$l")"; cp -L "$l" "$R$l"; done
    # podman 4.3's CDI library predates cdiVersion 0.6.0: the same devices as 0.5.0
    $POSCTL cdi --output "$T/pos.json" --cdi-version 0.5.0 --shim "$ROOT/$SHIM" --socket "$POS_SOCKET" \
        --dev-dir none --driver-dir "$ROOT/build/sim" >/dev/null
    if ! in_ns "${PODMAN[@]}" run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --rootfs "$R" /bin/true >"$T/ptest" 2>&1; then
        PODMAN_WHY="podman cannot run a container here: $(tail -1 "$T/ptest")"
        return 1
    fi
}
wait_ctr_gone() { # name: until podman has removed it (its --rm)
    for _ in $(seq 250); do pgrep -f "conmon .*-n $1 " >/dev/null || return 0; sleep 0.02; done
}

# ---- part 1: process, container, pod ------------------------------------------------------------
P1_RULES="[rule lat]
match_app = lat
slo_ms = $SLO
[rule batch]
match_app = batch*
class = batch
[rule ns-prod]
match_namespace = prod
slo_ms = $SLO
[rule ns-batch]
match_namespace = batch
class = batch
"
LAT_ARGS=(--model resnet18 --arrival "poisson:$LAT_RATE" --requests "$LAT_N" --slo "$SLO")
BATCH_ARGS=(--model resnet50 --batch 8 --requests 100000000 --duration 600)
# One run: variant (proc, ctr, pod) policy; prints "p50 p99 slo batch_launches_per_s class_lat class_batch"
p1_run() {
    local v=$1 pol=$2 lp bp lid bid c0 c1 t0 t1 lm bm
    rm -f "$T"/o/*
    posd_start "$pol" "$T/state/p1-$pol"
    case $v in
    proc)
        POS_APP=batch LD_PRELOAD=$SHIM $APP "${BATCH_ARGS[@]}" >"$T/o/batch.json" &
        bp=$! bm=$!
        ;;
    ctr)
        in_ctr "batch-$$" "$T/o/batch.json" "${BATCH_ARGS[@]/resnet50//models/resnet50.model}"
        bm=$BGPID
        bp=$(ctr_pid "batch-$$")
        ;;
    pod)
        make_pod batch trainer-0 train
        in_pod "$POD_PROCS" "$T/o/batch.json" $APP "${BATCH_ARGS[@]}"
        bp=$BGPID bm=$BGPID
        ;;
    esac
    bid=$(client_id "$bp")
    sleep 0.3
    case $v in
    proc)
        POS_APP=lat LD_PRELOAD=$SHIM $APP "${LAT_ARGS[@]}" >"$T/o/lat.json" &
        lp=$!
        lm=$!
        ;;
    ctr)
        in_ctr "lat-$$" "$T/o/lat.json" "${LAT_ARGS[@]/resnet18//models/resnet18.model}"
        lm=$BGPID
        lp=$(ctr_pid "lat-$$")
        ;;
    pod)
        make_pod prod detector-0 infer
        in_pod "$POD_PROCS" "$T/o/lat.json" $APP "${LAT_ARGS[@]}"
        lp=$BGPID lm=$BGPID
        ;;
    esac
    lid=$(client_id "$lp")
    c0=$(completed "$bid") t0=$(now_ns)
    sleep 0.5
    # what posd made of them (class, namespace), once the latency client is under way
    $POSCTL list >"$T/o/list"
    [ "$v" = pod ] && sleep 0.3 && $POSCTL list >"$T/o/list"
    while kill -0 "$lp" 2>/dev/null; do sleep 0.02; done
    c1=$(completed "$bid") t1=$(now_ns)
    wait "$lm" || true
    kill -INT "$bp" 2>/dev/null || true # a container's too: it shares the host's pid namespace
    wait "$bm" 2>/dev/null || true
    if [ "$v" = ctr ]; then wait_ctr_gone "batch-$$"; wait_ctr_gone "lat-$$"; fi
    posd_stop
    local j cl cb
    j=$(cat "$T/o/lat.json")
    cl=$(awk -v p="$lp" '$2 == p {print $5}' "$T/o/list") cb=$(awk -v p="$bp" '$2 == p {print $5}' "$T/o/list")
    RESULT="$(field "$j" p50_ms) $(field "$j" p99_ms) $(field "$j" slo_attainment) $(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" 'BEGIN {print (b - a) / ((t1 - t0) / 1e9)}') ${cl:-?} ${cb:-?} $(field "$j" requests)"
}

# ---- part 2: posd restart under running containers (or pods) -------------------------------------
# RESULT: one line per restart: "LAT_MS BATCH_MS LAT_FROM_LISTEN_MS BATCH_FROM_LISTEN_MS", the time
# from posd's exec (and from its "listening" line) to each client's registration in its log;
# then "RESULT p99 requests slo"
p2_run() {
    local kind=$1 lp bp bm lm r n lat_n
    rm -f "$T"/o/*
    RESULT=
    : >"$T/posd.log"
    posd_conf "$T/policy.none" "$P1_RULES"
    posd_start pos "$T/state/p2"
    lat_n=$((LAT_RATE * (4 + 3 * RESTARTS))) # past the last restart and its re-registration
    if [ "$kind" = ctr ]; then
        in_ctr "batch-$$" "$T/o/batch.json" --model /models/resnet50.model --batch 8 --requests 100000000 --duration 600
        bm=$BGPID
        bp=$(ctr_pid "batch-$$")
        in_ctr "lat-$$" "$T/o/lat.json" --model /models/resnet18.model --arrival "poisson:$LAT_RATE" --requests "$lat_n" --slo "$SLO"
        lm=$BGPID
        lp=$(ctr_pid "lat-$$")
    else
        make_pod batch trainer-1 train
        in_pod "$POD_PROCS" "$T/o/batch.json" $APP "${BATCH_ARGS[@]}"
        bp=$BGPID bm=$BGPID
        make_pod prod detector-1 infer
        in_pod "$POD_PROCS" "$T/o/lat.json" $APP --model resnet18 --arrival "poisson:$LAT_RATE" --requests "$lat_n" --slo "$SLO"
        lp=$BGPID lm=$BGPID
    fi
    client_id "$bp" >/dev/null
    client_id "$lp" >/dev/null
    for ((r = 0; r < RESTARTS; r++)); do
        sleep 1.5
        posd_stop -KILL
        sleep 1 # posd away: the shims run in passthrough
        n=$(wc -l <"$T/posd.log")
        posd_start pos "$T/state/p2"
        for _ in $(seq 250); do
            tail -n +"$((n + 1))" "$T/posd.log" | grep -q "pid $lp " &&
                tail -n +"$((n + 1))" "$T/posd.log" | grep -q "pid $bp " && break
            sleep 0.02
        done
        RESULT+=$(tail -n +"$((n + 1))" "$T/posd.log" | awk -v t0="$POSD_T0" -v lp="$lp" -v bp="$bp" '
            function ts(s) { sub(/^posd\[/, "", s); sub(/\].*/, "", s); return s + 0 }
            /listening on/ && !l {l = ts($0)}
            $0 ~ ("pid " lp " ") && / client [0-9]+: pid / && !a {a = ts($0)}
            $0 ~ ("pid " bp " ") && / client [0-9]+: pid / && !b {b = ts($0)}
            END {printf "%s %s %s %s\n", (a ? (a - t0) * 1000 : "null"), (b ? (b - t0) * 1000 : "null"),
                 (a ? (a - l) * 1000 : "null"), (b ? (b - l) * 1000 : "null")}')$'\n'
    done
    wait "$lm" || true
    kill -INT "$bp" 2>/dev/null || true
    wait "$bm" 2>/dev/null || true
    if [ "$kind" = ctr ]; then wait_ctr_gone "batch-$$"; wait_ctr_gone "lat-$$"; fi
    posd_stop
    local j
    j=$(cat "$T/o/lat.json")
    RESULT+="RESULT $(field "$j" p99_ms) $(field "$j" requests) $(field "$j" slo_attainment) $lat_n $(field "$j" makespan_s) $(field "$j" p50_ms)"
}

# ---- part 3: kubelet restart ------------------------------------------------------------------
p3_run() {
    local kd=$T/kubelet line r
    mkdir -p "$kd" "$T/dev"
    mknod "$T/dev/nvidia0" c 195 0 && mknod "$T/dev/nvidiactl" c 195 255
    posd_conf "$T/policy.none" ""
    posd_start pos "$T/state/p3"
    coproc FAKE { exec /usr/bin/python3 tests/kube/fake_kubelet.py "$kd" 2>>"$T/fake.log"; }
    read -r -t 20 line <&"${FAKE[0]}"
    $PLUGIN --kubelet-dir "$kd" --shares 8 --socket "$POS_SOCKET" --shim "$ROOT/$SHIM" --dev-dir "$T/dev" 2>>"$T/plugin.log" &
    PLUGIN_PID=$!
    fake_wait() { # event: the next line that has it
        local l
        while read -r -t 20 l <&"${FAKE[0]}"; do [[ $l == *"$1"* ]] && { echo "$l"; return 0; }; done
        return 1
    }
    fake_wait '"event": "register"' >/dev/null
    RESULT=
    for ((r = 0; r < KUBELET_N; r++)); do
        sleep 0.2
        echo '{"cmd": "restart"}' >&"${FAKE[1]}"
        line=$(fake_wait '"event": "register"') || { RESULT+=null$'\n'; continue; }
        RESULT+=$(sed -n 's/.*"since_restart_ms": \([0-9.]*\).*/\1/p' <<<"$line")$'\n'
    done
    kill "$PLUGIN_PID" 2>/dev/null; wait "$PLUGIN_PID" 2>/dev/null || true
    PLUGIN_PID=
    kill "$FAKE_PID" 2>/dev/null
    wait "$FAKE_PID" 2>/dev/null || true
    FAKE_PID=
    posd_stop
}

# ---- part 4: one ConfigMap ---------------------------------------------------------------------
P4_SLO=${P4_SLO:-$SLO}
cm_dir() { # name content: a ConfigMap volume's layout (..data link to a timestamped directory)
    local d=$T/$1
    mkdir -p "$d/..2026_01_01_00_00_01.000"
    printf '%s' "$2" >"$d/..2026_01_01_00_00_01.000/20-namespaces.conf"
    printf '[class interactive]\npriority = 5\nmem_limit = none\n' >"$d/..2026_01_01_00_00_01.000/10-classes.conf"
    ln -sfn ..2026_01_01_00_00_01.000 "$d/..data"
    ln -sfn ..data/10-classes.conf "$d/10-classes.conf"
    ln -sfn ..data/20-namespaces.conf "$d/20-namespaces.conf"
}
CM_POLICY="[rule prod]
match_namespace = prod
class = interactive
slo_ms = $P4_SLO
[rule team-a]
match_namespace = team-a
class = batch
sm_share = 60
[rule team-b]
match_namespace = team-b
class = batch
sm_share = 30
"
CM_EQUAL="[rule mps-equal]
match_all = yes
sm_share = 33
"
# One run: variant (policy, none, equal); prints "p50 p99 slo a_launches_per_s b_launches_per_s
# class_lat class_a class_b"
p4_run() {
    local v=$1 ap bp lp aid bid c0a c0b c1a c1b t0 t1
    rm -f "$T"/o/*
    case $v in
    policy) posd_conf "$T/cm-policy" "" ;;
    equal) posd_conf "$T/cm-equal" "" ;;
    none) posd_conf "$T/cm-none" "" ;;
    esac
    posd_start pos "$T/state/p4-$v"
    make_pod team-a train-a-0 train
    in_pod "$POD_PROCS" "$T/o/a.json" $APP "${BATCH_ARGS[@]}"
    ap=$BGPID
    make_pod team-b train-b-0 train
    in_pod "$POD_PROCS" "$T/o/b.json" $APP "${BATCH_ARGS[@]}"
    bp=$BGPID
    aid=$(client_id "$ap") bid=$(client_id "$bp")
    sleep 0.5
    make_pod prod detector-0 infer
    in_pod "$POD_PROCS" "$T/o/lat.json" $APP --model resnet18 --arrival "poisson:$LAT_RATE" --requests "$LAT_N" --slo "$P4_SLO"
    lp=$BGPID
    client_id "$lp" >/dev/null
    c0a=$(completed "$aid") c0b=$(completed "$bid") t0=$(now_ns)
    sleep 0.5
    $POSCTL list >"$T/o/list"
    wait "$lp" || true
    c1a=$(completed "$aid") c1b=$(completed "$bid") t1=$(now_ns)
    kill -INT "$ap" "$bp" 2>/dev/null || true
    wait "$ap" "$bp" 2>/dev/null || true
    posd_stop
    local j
    j=$(cat "$T/o/lat.json")
    local ra rb
    ra=$(awk -v a="$c0a" -v b="$c1a" -v t0="$t0" -v t1="$t1" 'BEGIN {print (b - a) / ((t1 - t0) / 1e9)}')
    rb=$(awk -v a="$c0b" -v b="$c1b" -v t0="$t0" -v t1="$t1" 'BEGIN {print (b - a) / ((t1 - t0) / 1e9)}')
    RESULT="$(field "$j" p50_ms) $(field "$j" p99_ms) $(field "$j" slo_attainment) $ra $rb"
    RESULT+=" $(awk -v p="$lp" '$2 == p {print $5}' "$T/o/list") $(awk -v p="$ap" '$2 == p {print $5}' "$T/o/list") $(awk -v p="$bp" '$2 == p {print $5}' "$T/o/list")"
}

# ---- run ---------------------------------------------------------------------------------------
start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
has() { [[ " $PARTS " == *" $1 "* ]]; }
CTR=ctr
if has 1 || has 2; then podman_setup || { CTR=; echo "bench-kube: containers skipped: $PODMAN_WHY" >&2; }; fi
declare -A R1 R4
P1_POLS=${P1_POLS:-pos priority}
P1_VARS="proc${CTR:+ ctr} pod"
if has 1; then
    posd_conf "$T/policy.none" "$P1_RULES"
    for ((r = 0; r < REPS; r++)); do
        for pol in $P1_POLS; do
            for v in $P1_VARS; do
                echo "bench-kube: part 1 $pol $v round $((r + 1))/$REPS..." >&2
                p1_run "$v" "$pol"
                R1[$pol|$v]+="$RESULT"$'\n'
            done
        done
    done
fi
P2=
if has 2; then
    P2_KIND=${CTR:-pod}
    echo "bench-kube: part 2 ($P2_KIND), $RESTARTS posd restarts..." >&2
    p2_run "$P2_KIND"
    P2=$RESULT
fi
P3= P3_WHY=
if has 3; then
    if ! /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null; then
        P3_WHY="/usr/bin/python3 has no grpcio or protobuf"
    else
        echo "bench-kube: part 3, $KUBELET_N kubelet restarts..." >&2
        p3_run
        P3=$(grep . <<<"$RESULT")
    fi
fi
if has 4; then
    cm_dir cm-policy "$CM_POLICY"
    cm_dir cm-equal "$CM_EQUAL"
    cm_dir cm-none "# no rules: every pod in the default class, no share
"
    for ((r = 0; r < REPS; r++)); do
        for v in none equal policy; do
            echo "bench-kube: part 4 $v round $((r + 1))/$REPS..." >&2
            p4_run "$v"
            R4[$v]+="$RESULT"$'\n'
        done
    done
fi
elapsed=$(($(date +%s) - start))
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report --------------------------------------------------------------------------------------
col() { awk -v c="$1" 'NF {print $c}'; }
med() { col "$2" <<<"$1" | median; }
runs() { col "$2" <<<"$1" | while read -r v; do printf '%s ' "$(fmt "$v")"; done; }
spread() { col "$2" <<<"$1" | sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {if (NR) printf "%s–%s", lo, hi}'; }
uniq_col() { col "$2" <<<"$1" | sort -u | paste -sd/; }
{
    echo "# Kubernetes parts end to end: pods against processes, restarts, one ConfigMap"
    echo
    echo "**Simulated GPU: every figure here is on pos's simulated driver** (\`build/sim/libcuda.so.1\`,"
    echo "h200 preset in MPS mode, one shared virtual GPU), not on an NVIDIA GPU, and no kubelet: the"
    echo "Kubernetes side is podman with our CDI spec, kubepods-like cgroups with fake kubelet log"
    echo "directories (as tests/integration/test_pods.c) and the fake kubelet of tests/kube/."
    echo "Produced by \`make bench-kube\` (\`bash bench/kube.sh\`, REPS=$REPS RESTARTS=$RESTARTS"
    echo "KUBELET_N=$KUBELET_N PARTS=\"$PARTS\") on $(date -u +%Y-%m-%d), commit"
    echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)),"
    echo "$(uname -sr), podman $(podman --version 2>/dev/null | awk '{print $3}'), in ${elapsed} s; load average (1, 5, 15 min)"
    echo "$load0 at the start, $load1 at the end. Medians of the rounds, every round listed."
    if has 1; then
        echo
        echo "## 1. A pod behaves as a process on the node does"
        echo
        echo "A latency client (\`posapp --model resnet18 --arrival poisson:$LAT_RATE --requests $LAT_N --slo $SLO\`)"
        echo "started 0.3 s after a batch closed loop (\`--model resnet50 --batch 8\`, stopped with SIGINT"
        echo "when the latency client is done), under \`posd -p POLICY\`, three ways, alternated in each"
        echo "round: **proc**, plain processes under \`LD_PRELOAD\` (rules \`match_app = lat\` → \`slo_ms = $SLO\`,"
        echo "\`match_app = batch*\` → class batch); **ctr**, each in its own podman container"
        echo "(\`podman run --rootfs ... --device pos.dev/gpu=gpu0\`, the spec of"
        echo "\`posctl cdi --cdi-version 0.5.0 --driver-dir build/sim --dev-dir none\`: the shim, posd's"
        echo "socket directory and the simulated driver reach the container only through the spec; same"
        echo "app rules through \`POS_APP\`); **pod**, plain processes moved into kubepods cgroups"
        echo "(\`kubepods-besteffort-pod<UID>.slice/cri-containerd-<ID>.scope\`) with fake kubelet log"
        echo "directories naming them \`prod/detector-0\` and \`batch/trainer-0\`, no \`POS_APP\`: only the rules"
        echo "\`match_namespace = prod\` → \`slo_ms = $SLO\` and \`match_namespace = batch\` → class batch apply."
        echo "Batch throughput: the batch client's completed launches (posd's counter) per second over the"
        echo "latency client's run. *class*: what \`posctl list\` showed for the latency and batch clients."
        [ -z "$CTR" ] && { echo; echo "**Containers not run**: $PODMAN_WHY."; }
        echo
        echo "| policy | way | latency p50 ms | p99 ms | p99 runs | SLO attainment | batch launches/s | batch runs | **p99 / proc** | **batch / proc** | SLO / proc | class (lat, batch) |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
        for pol in $P1_POLS; do
            b=${R1[$pol|proc]}
            for v in $P1_VARS; do
                c=${R1[$pol|$v]}
                echo "| $pol | $v | $(fmt "$(med "$c" 1)") | $(fmt "$(med "$c" 2)") | $(runs "$c" 2)| $(fmt "$(med "$c" 3)") | $(fmt "$(med "$c" 4)") | $(runs "$c" 4)| $(ratio "$(med "$c" 2)" "$(med "$b" 2)") | $(ratio "$(med "$c" 4)" "$(med "$b" 4)") | $(ratio "$(med "$c" 3)" "$(med "$b" 3)") | $(uniq_col "$c" 5), $(uniq_col "$c" 6) |"
            done
        done
        echo
        echo "Target: the container and pod ways unchanged against proc within noise (the spread of"
        echo "proc's own rounds: p99 $(for pol in $P1_POLS; do printf '%s %s ms; ' "$pol" "$(spread "${R1[$pol|proc]}" 2)"; done)"
        echo "batch $(for pol in $P1_POLS; do printf '%s %s launches/s; ' "$pol" "$(spread "${R1[$pol|proc]}" 4)"; done | sed 's/; $//'))."
    fi
    if has 2; then
        echo
        echo "## 2. posd restart under running clients"
        echo
        if [ "$P2_KIND" = ctr ]; then where="podman containers (CDI device, as *ctr* in 1)"; else where="kubepods cgroups"; fi
        echo "Two clients in $where: a batch"
        echo "resnet50 closed loop and a latency resnet18 (Poisson $LAT_RATE/s, SLO $SLO ms) — under \`posd -p pos\`;"
        echo "$RESTARTS times, 1.5 s apart: \`kill -9\` posd, 1 s away, posd started again (same socket path,"
        echo "same state directory). Re-registration: from posd's exec (CLOCK_MONOTONIC, taken just before"
        echo "the exec) to the client's \`client N: pid P ...\` line in posd's log (the same clock), and from"
        echo "posd's \"listening on\" line (its socket ready) to it. The shim retries every 0.5 s"
        echo "(\`RECONNECT_NS\`, shim/session.c)."
        echo
        rows=$(grep -v '^RESULT' <<<"$P2" || true)
        res=$(grep '^RESULT' <<<"$P2" || true)
        echo "| client | from exec, median ms | max ms | every restart ms | from socket ready, median ms | max ms |"
        echo "|---|---|---|---|---|---|"
        echo "| latency | $(fmt "$(med "$rows" 1)") | $(fmt "$(col 1 <<<"$rows" | maxof)") | $(runs "$rows" 1)| $(fmt "$(med "$rows" 3)") | $(fmt "$(col 3 <<<"$rows" | maxof)") |"
        echo "| batch | $(fmt "$(med "$rows" 2)") | $(fmt "$(col 2 <<<"$rows" | maxof)") | $(runs "$rows" 2)| $(fmt "$(med "$rows" 4)") | $(fmt "$(col 4 <<<"$rows" | maxof)") |"
        read -r _ rp99 rreq rslo rwant rspan rp50 <<<"$res"
        echo
        echo "Fail-open: the latency client, running through all $RESTARTS restarts ($RESTARTS s without posd in"
        echo "all), completed $rreq of $rwant requests in $(fmt "$rspan") s (the schedule is $(awk -v n="$rwant" -v r="$LAT_RATE" 'BEGIN {printf "%.1f", n / r}') s), p50 $(fmt "$rp50") ms, p99 $(fmt "$rp99") ms,"
        echo "SLO attainment $(fmt "$rslo"): requests kept completing while posd was away (a client blocked"
        echo "for the 1 s outage would have queued ~$LAT_RATE requests and put p99 near 1 s)."
        echo
        echo "Target: every client registered again within 1 s of posd's restart."
    fi
    if has 3; then
        echo
        echo "## 3. Kubelet restart: the device plugin's re-registration"
        echo
        if [ -n "$P3_WHY" ]; then
            echo "Not run: $P3_WHY."
        else
            echo "\`pos-device-plugin --shares 8\` registered with tests/kube/fake_kubelet.py (grpcio), $KUBELET_N"
            echo "times \`{\"cmd\": \"restart\"}\`: the fake stops its server, removes the plugin's socket and"
            echo "kubelet.sock, waits 50 ms and serves kubelet.sock again; the time is the fake's"
            echo "\`since_restart_ms\`, from the new kubelet.sock to the plugin's Register arriving (0.2 s between"
            echo "restarts)."
            echo
            echo "| restarts | median ms | max ms | every restart ms |"
            echo "|---|---|---|---|"
            echo "| $(grep -c . <<<"$P3") | $(fmt "$(median <<<"$P3")") | $(fmt "$(maxof <<<"$P3")") | $(while read -r v; do printf '%s ' "$(fmt "$v")"; done <<<"$P3")|"
            echo
            echo "Target: within 1 s."
        fi
    fi
    if has 4; then
        echo
        echo "## 4. Unequal shares, priorities and SLOs per namespace from one ConfigMap"
        echo
        echo "Three pods as processes in kubepods cgroups with fake kubelet log directories: \`team-a/train-a-0\`"
        echo "and \`team-b/train-b-0\`, the same batch closed loop each (resnet50, batch 8), and \`prod/detector-0\`,"
        echo "the latency client (resnet18, Poisson $LAT_RATE/s, $LAT_N requests, measured against $P4_SLO ms),"
        echo "started 0.5 s after them, under \`posd -p pos\` with \`policy_dir\` a ConfigMap-like directory"
        echo "(\`..data\` link, \`10-classes.conf\` of deploy/kubernetes/policy-configmap.yaml and a"
        echo "\`20-namespaces.conf\`), alternated in each round:"
        echo
        echo "- **none**: no rules: every pod in the default class, no share (what NVIDIA's device plugin's"
        echo "  time slicing gives: equal replicas, nothing between them but the GPU's own sharing);"
        echo "- **equal**: \`match_all = yes\`, \`sm_share = 33\`: equal MPS slices, as NVIDIA's plugin's MPS"
        echo "  sharing gives 3 replicas (\`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE\` = 100/3);"
        echo "- **policy**: \`prod\` → class \`interactive\` (priority 5) with \`slo_ms = $P4_SLO\`; \`team-a\` → class batch,"
        echo "  \`sm_share = 60\`; \`team-b\` → class batch, \`sm_share = 30\`."
        echo
        echo "Throughput: each batch pod's completed launches (posd's counter) per second over the latency"
        echo "pod's run; *team-a share*: team-a's over both teams'."
        echo
        echo "| variant | prod p50 ms | prod p99 ms | p99 runs | prod SLO attainment | team-a launches/s | team-b launches/s | **team-a share** | share runs | team-a + team-b | classes (prod, a, b) |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|"
        for v in none equal policy; do
            c=${R4[$v]}
            shares=$(awk 'NF {print ($4 + $5 > 0 ? $4 / ($4 + $5) : "null")}' <<<"$c")
            echo "| $v | $(fmt "$(med "$c" 1)") | $(fmt "$(med "$c" 2)") | $(runs "$c" 2)| $(fmt "$(med "$c" 3)") | $(fmt "$(med "$c" 4)") | $(fmt "$(med "$c" 5)") | $(fmt "$(median <<<"$shares")") | $(while read -r s; do printf '%s ' "$(fmt "$s")"; done <<<"$shares")| $(fmt "$(awk 'NF {print $4 + $5}' <<<"$c" | median)") | $(uniq_col "$c" 6), $(uniq_col "$c" 7), $(uniq_col "$c" 8) |"
        done
    fi
} >"$OUT"
echo "bench-kube: wrote $OUT" >&2
