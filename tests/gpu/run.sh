#!/usr/bin/env bash
# The real-GPU suite (issue 12, docs/gpu.md): pos under CUDA programs and PyTorch on an NVIDIA
# GPU, in one prepared run of at most 8.5 minutes. Writes OUTDIR/gpu-h200.md (the report: date,
# GPU, driver, CUDA and PyTorch versions, every command and figure), OUTDIR/raw.tar.gz (every
# JSON line, log and shim trace) and OUTDIR/run.log.
#
#   bash tests/gpu/run.sh OUTDIR          # on the GPU machine, from the repository root
#   bash tests/gpu/run.sh OUTDIR --sim    # dry run here: the simulated driver, posapp models
#   make gpu-dry-run                      # the dry run into build/gpu-dry-run
#
# It builds nothing on the GPU machine: it runs what tests/gpu/build.sh put into build/gpu
# (carry that folder). It needs there: nvidia-smi, the NVIDIA driver's libcuda.so.1, python3
# with PyTorch (torchvision for the ResNet parts; without it those parts say so and are
# skipped), libcudart.so.13/libcublas.so.13 for two of the check programs (the toolkit's, or
# PyTorch's), and nvidia-cuda-mps-control for the MPS cases (skipped without it).
#
# Parts and their time budgets on the GPU (s): the whole run stops starting parts once the
# total budget (POS_GPU_BUDGET_S, default 490) would be exceeded; each process has a timeout.
#   1 interception   75  cudart static/shared, per-thread stream, graph, cuBLAS, PyTorch
#                        (ResNet-50, BERT-base encoder): outputs identical with and without
#                        the shim, the trace's kernels = the program's (or the profiler's)
#                        count, POS_DEBUG finds no unknown entry point; launch cost; device
#                        times (the shim's timing events) of a resnet50 run
#   2 overhead      110  ResNet-50 b1 and b32 throughput: no shim, shim passthrough, posd
#                        fifo, posd priority; 3 alternating repetitions, medians, spread
#   3 isolation      95  latency ResNet-50 b1 closed loop beside batch ResNet-50 b32: alone,
#                        no scheduler, posd fifo, posd priority, MPS, MPS + posd priority
#   4 co-location    80  ResNet-18 + 34 + 50 b1 as three processes: one after another, all at
#                        once, MPS, posd fifo, posd priority; speedup and GPU utilisation
#   5 calibration    50  posapp --real solo latency per model and R18+R34+R50 co-run
#                        slowdowns against possim's h200 preset
#   6 memory         45  memory limits (docs/memory.md): every allocation path against a 2 GiB
#                        limit, a vLLM-like profiling run, the ledger against NVML's
#                        per-process figure, cuMemGetInfo against NVML under PyTorch
# Dry run (--sim): the same logic, posapp (resnet models) on build/sim/libcuda.so.1 with the
# h200 preset instead of PyTorch; POS_SIM_MODE=mps stands in for the MPS daemon; no NVML.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
if [ $# -lt 1 ] || [ "${1:0:1}" = - ]; then
    echo "usage: bash tests/gpu/run.sh OUTDIR [--sim]" >&2
    exit 2
fi
OUTDIR=$1
SIM=0
[ "${2:-}" = --sim ] && SIM=1
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
GPU=${POS_GPU_DIR:-build/gpu}
PY=${PYTHON:-python3}
BUDGET=${POS_GPU_BUDGET_S:-490}
[ $SIM = 1 ] && BUDGET=${POS_GPU_BUDGET_S:-140}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
T=$(mktemp -d /tmp/pos-gpu.XXXXXX)
R=$T/raw
mkdir -p "$R"
LOG=$OUTDIR/run.log
: >"$LOG"
T0=$(date +%s.%N)
fail=0
BODY=$T/body.md
: >"$BODY"

note() { echo "gpu [$(elapsed)s]: $*" | tee -a "$LOG" >&2; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.0f", b - a}'; }
left() { awk -v a="$T0" -v b="$(date +%s.%N)" -v B="$BUDGET" 'BEGIN {printf "%d", B - (b - a)}'; }
md() { printf '%s\n' "$@" >>"$BODY"; }
med() { printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | sort -g |
    awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'; }
spread() { printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | sort -g |
    awk '{a[NR] = $1} END {if (NR) printf "%s-%s", a[1], a[NR]; else print "-"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-"}'; }
# jf FILE KEY [LINE]: a flat JSON line's value (posapp's and torch_bench's output)
jf() { sed -n "${3:-1}p" "$1" 2>/dev/null | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'; }
die() { note "$*"; exit 2; }

fail_check() { fail=1; }

# --- what runs -----------------------------------------------------------------------------
APP=$ROOT/$GPU/bin/posapp
POSD=$ROOT/$GPU/bin/posd
POSSIM=$ROOT/$GPU/bin/possim
SHIM=$ROOT/$GPU/lib/libposshim.so
TB=$ROOT/$GPU/bin/tests
for f in "$APP" "$POSD" "$POSSIM" "$SHIM"; do
    [ -e "$f" ] || die "$f missing: build the carried folder first (make gpu-build) and carry $GPU"
done
# hermetic, as make test: nothing the caller exported (POS_SOCKET of a posd they run,
# POS_MODE, POS_TRACE, ...) reaches the clients
for v in $(compgen -e); do
    case $v in POS_*) unset "$v" ;; esac
done
unset LD_PRELOAD
export POS_MODELS_DIR=$ROOT/$GPU/share/pos/models
SOCK=$T/posd.sock
export POS_SOCKET=$T/nowhere.sock # nothing attaches to a posd it did not start

if [ $SIM = 1 ]; then
    [ -e build/sim/libcuda.so.1 ] || die "build/sim/libcuda.so.1 missing: make all"
    export LD_LIBRARY_PATH=$ROOT/build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export POS_SIM_DEVICE=h200 POS_SIM_MODE=timeslice POS_SIM_INSTANCE=gpu-dry-$$
    GPUNAME="simulated h200 preset (build/sim/libcuda.so.1, POS_SIM_DEVICE=h200)"
    DRIVER="simulated"
    REAL=()
else
    GPUNAME=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    [ -n "$GPUNAME" ] || { note "no NVIDIA GPU visible (nvidia-smi): nothing to run"; exit 2; }
    DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
    REAL=(--real)
fi
TORCH=none TORCH_CUDA=- TV=none
if [ $SIM = 0 ]; then
    TORCH=$($PY -c 'import torch; assert torch.cuda.is_available(); print(torch.__version__)' 2>/dev/null) || TORCH=none
    [ "$TORCH" != none ] && TORCH_CUDA=$($PY -c 'import torch; print(torch.version.cuda)' 2>/dev/null)
    TV=$($PY -c 'import torchvision; print(torchvision.__version__)' 2>/dev/null) || TV=none
    # libcudart.so.13 / libcublas.so.13 for the shared-runtime and cuBLAS programs: the
    # toolkit's, else the ones PyTorch ships (nvidia-* wheels)
    CUDA_LIBS=$CUDA_HOME/lib64:$CUDA_HOME/lib:$CUDA_HOME/targets/x86_64-linux/lib
    pylibs=$($PY -c 'import glob, os, site; print(":".join(sorted({os.path.dirname(p) for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/*/lib/lib*.so*")})))' 2>/dev/null)
    CUDA_LIBS=$CUDA_LIBS${pylibs:+:$pylibs}
fi
NVCC_V=$("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | tail -1)
note "start: $GPUNAME; budget ${BUDGET}s; raw output in $T"

# --- running one process -------------------------------------------------------------------
# runc NAME TIMEOUT CMD...: stdout to $R/NAME.json, stderr to $R/NAME.err; logs the command
# (with $T written as $T) into the part's command list; returns the command's status
# A process that times out marks its configuration broken (CUR_CFG: none, shim, fifo,
# priority), and later runs skip that configuration, so one hang cannot eat the run; no
# timeout reaches past the hard deadline (the budget + 20 s).
CMDS=$T/cmds
declare -A BROKEN
CUR_CFG=none
cap_tmo() { awk -v t="$1" -v l="$(left)" 'BEGIN {l += 20; if (l < 5) l = 5; printf "%d", t < l ? t : l}'; }
timed_out() { # name rc
    [ "$2" = 124 ] || [ "$2" = 137 ] || return 1
    note "$1: timed out; configuration '$CUR_CFG' is not used again"
    BROKEN[$CUR_CFG]=1
    fail_check
}
runc() {
    local name=$1 tmo
    tmo=$(cap_tmo "$2")
    shift 2
    printf '%s\n' "$*" | sed "s|$T|\$T|g; s|$ROOT/||g" >>"$CMDS"
    timeout -k 3 "$tmo" "$@" >"$R/$name.json" 2>"$R/$name.err"
    local rc=$?
    timed_out "$name" $rc
    return $rc
}
# bgc NAME TIMEOUT CMD...: the same in the background; bgwait waits for them all
BG=() BGN=()
bgc() {
    local name=$1 tmo
    tmo=$(cap_tmo "$2")
    shift 2
    printf '%s &\n' "$*" | sed "s|$T|\$T|g; s|$ROOT/||g" >>"$CMDS"
    timeout -k 3 "$tmo" "$@" >"$R/$name.json" 2>"$R/$name.err" &
    BG+=($!) BGN+=("$name")
}
bgwait() {
    local i rc
    for i in "${!BG[@]}"; do
        wait "${BG[$i]}" 2>/dev/null
        rc=$?
        timed_out "${BGN[$i]}" $rc
    done
    BG=() BGN=()
}

# the environment of a configuration: none, shim (passthrough), fifo/priority (under posd)
cfg_env() {
    case $1 in
    none) ;;
    shim) echo "LD_PRELOAD=$SHIM" POS_MODE=passthrough ;;
    fifo | priority) echo "LD_PRELOAD=$SHIM" POS_MODE=scheduled "POS_SOCKET=$SOCK" ;;
    esac
}
POSD_PID=
printf '[rule batch]\nmatch_app = batch-*\nclass = batch\n[rule memcap]\nmatch_app = mem-*\nmem_limit = 2G\n' >"$T/posd.conf"
posd_up() { # policy
    rm -f "$SOCK"
    echo "posd -f -c \$T/posd.conf -s \$T/posd.sock -p $1 &" >>"$CMDS"
    "$POSD" -f -c "$T/posd.conf" -s "$SOCK" -p "$1" >>"$R/posd.log" 2>&1 &
    POSD_PID=$!
    for _ in $(seq 250); do [ -S "$SOCK" ] && return 0; sleep 0.02; done
    note "posd did not come up (raw/posd.log)"
    fail_check
    return 1
}
posd_down() {
    [ -n "$POSD_PID" ] || return 0
    kill -TERM "$POSD_PID" 2>/dev/null
    wait "$POSD_PID" 2>/dev/null
    POSD_PID=
}
cfg_up() {
    CUR_CFG=$1
    if [ -n "${BROKEN[$1]:-}" ]; then
        note "configuration $1 skipped: it timed out before"
        return 1
    fi
    case $1 in fifo | priority) posd_up "$1" ;; esac
}
cfg_down() {
    posd_down
    CUR_CFG=none
}

# MPS: a control daemon with its pipe and log folders under $T (real GPU); the simulated
# driver's mps mode in the dry run
MPS=unavailable
mps_up() {
    if [ $SIM = 1 ]; then
        export POS_SIM_MODE=mps POS_SIM_INSTANCE=gpu-dry-$$-mps
        return 0
    fi
    [ "$MPS" = unavailable ] && return 1
    export CUDA_MPS_PIPE_DIRECTORY=$T/mps-pipe CUDA_MPS_LOG_DIRECTORY=$T/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    echo "CUDA_MPS_PIPE_DIRECTORY=\$T/mps-pipe CUDA_MPS_LOG_DIRECTORY=\$T/mps-log nvidia-cuda-mps-control -d" >>"$CMDS"
    nvidia-cuda-mps-control -d >>"$R/mps.log" 2>&1 || { MPS=unavailable; return 1; }
    MPS_ON=1
    sleep 0.5
}
mps_down() {
    if [ $SIM = 1 ]; then
        export POS_SIM_MODE=timeslice POS_SIM_INSTANCE=gpu-dry-$$
        return 0
    fi
    [ "${MPS_ON:-0}" = 1 ] || return 0
    echo quit | timeout 10 nvidia-cuda-mps-control >>"$R/mps.log" 2>&1
    MPS_ON=0
    sleep 1
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
# on any exit: no client, posd or MPS daemon of this run is left behind
cleanup() {
    local j
    for j in $(jobs -p); do kill "$j" 2>/dev/null; done
    posd_down
    [ $SIM = 0 ] && mps_down
}
trap cleanup EXIT
trap 'note "interrupted"; exit 130' INT TERM
if [ $SIM = 1 ]; then
    MPS="simulated (POS_SIM_MODE=mps: all processes share the SMs; no MPS daemon)"
elif pgrep -f nvidia-cuda-mps-control >/dev/null 2>&1; then
    MPS="unavailable: an MPS control daemon was already running on the machine (so every case here ran under it)"
elif command -v nvidia-cuda-mps-control >/dev/null; then
    MPS=probe
    if mps_up && mps_down; then MPS=yes; else MPS=unavailable; fi
    if [ "$MPS" = yes ]; then MPS="nvidia-cuda-mps-control -d (pipe and log folders in a temporary folder)"; fi
fi
note "MPS: $MPS"

# GPU utilisation while a scenario runs (NVML through nvidia-smi; not in the dry run)
UTIL_PID=
util_start() { # name
    [ $SIM = 1 ] && return
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 >"$R/$1.util" 2>/dev/null &
    UTIL_PID=$!
}
util_stop() { # name -> mean utilisation %
    if [ $SIM = 1 ]; then echo "n/a"; return; fi
    kill "$UTIL_PID" 2>/dev/null
    wait "$UTIL_PID" 2>/dev/null
    awk '$1 ~ /^[0-9]+$/ {s += $1; n++} END {if (n) printf "%.0f %%", s / n; else print "-"}' "$R/$1.util"
}

# --- workloads: PyTorch on the GPU, posapp models in the dry run ---------------------------
# wl MODEL BATCH SECONDS|iters:N [READY-NAME]: sets W, the command of one closed-loop client
# (one JSON line per batch; BATCH may be a list 1,32 for PyTorch)
HAVE_TORCH=1
[ $SIM = 0 ] && [ "$TORCH" = none ] && HAVE_TORCH=0
HAVE_TV=1
[ $SIM = 0 ] && [ "$TV" = none ] && HAVE_TV=0
wl() {
    local m=$1 b=$2 len=$3 ready=${4:-}
    if [ $SIM = 1 ]; then
        W=("$APP" --model "$m" --batch "$b")
        case $len in
        iters:*) W+=(--requests "${len#iters:}") ;;
        *) W+=(--duration "$len" --requests 100000000) ;;
        esac
        return
    fi
    W=("$PY" "$ROOT/tests/gpu/torch_bench.py" --model "$m" --batch "$b" --warmup 10)
    case $len in
    iters:*) W+=(--iters "${len#iters:}") ;;
    *) W+=(--seconds "$len") ;;
    esac
    [ -n "$ready" ] && W+=(--ready "$T/$ready.ready" --go "$T/go")
}
# go NAME...: wait (at most 60 s) until every client NAME is warmed up, then start them all
go() {
    [ $SIM = 1 ] && return
    local n
    for _ in $(seq 3000); do
        n=0
        for x in "$@"; do [ -e "$T/$x.ready" ] && n=$((n + 1)); done
        [ $n = $# ] && break
        sleep 0.02
    done
    touch "$T/go"
}
go_reset() { rm -f "$T"/*.ready "$T/go"; }

# part NAME BUDGET TITLE: starts a part if the budget allows
PART=
part() {
    part_end
    PART=$1
    local budget=$2
    shift 2
    : >"$CMDS"
    md "" "## $*" ""
    [ $SIM = 1 ] && budget=$((budget / 3)) # the dry run's parts are about a third as long
    if [ "$(left)" -lt "$budget" ]; then
        md "Skipped: ${budget}s budgeted, $(left)s of the run's ${BUDGET}s left."
        note "part $PART skipped (budget)"
        PART=skipped
        return 1
    fi
    PART_T0=$(date +%s)
    note "part $PART (budget ${budget}s)"
    return 0
}
part_end() {
    [ -n "$PART" ] || return 0
    if [ "$PART" != skipped ] && [ -s "$CMDS" ]; then
        md "" "Took $(($(date +%s) - PART_T0)) s. Commands, each distinct one once (\`\$T\` is the run's temporary folder; a client runs under the posd started last before it):" "" '```'
        awk '!seen[$0]++' "$CMDS" | head -60 >>"$BODY"
        md '```'
    fi
    PART=
}

# --- 1. interception ------------------------------------------------------------------------
ops() { grep -v '^#' "$1" 2>/dev/null | awk '$3 ~ /^(kernel|kernel_ex|cooperative)$/' | wc -l; }
allops() {
    local n
    n=$(grep -vc '^#' "$1" 2>/dev/null)
    echo "${n:-0}"
}
summary() { grep '^# summary' "$1" 2>/dev/null | sed 's/^# summary //'; }
unknown_eps() { grep -c 'does not know' "$1" 2>/dev/null; }
ROWS=""
row() { ROWS+="| $1 | $2 | $3 |"$'\n'; }
# icheck NAME COMPARE EXPECT CMD...: runs CMD without and with the shim (POS_DEBUG=1,
# POS_TRACE); COMPARE: a sed script that keeps what must be identical in stdout ('' = all);
# EXPECT: how the trace is judged: eq:N (trace operators = N), eqjson (= the plain run's
# "launches"), ge:N, prof (= "kernels" of the
# shim run's own JSON), none
icheck() {
    local name=$1 cmp=$2 expect=$3
    shift 3
    local tr=$T/$name.trace rc1 rc2 CUR_CFG=icheck
    runc "$name.plain" 60 "$@"
    rc1=$?
    runc "$name.shim" 60 env "LD_PRELOAD=$SHIM" POS_MODE=passthrough POS_DEBUG=1 "POS_TRACE=$tr" "$@"
    rc2=$?
    if [ $rc1 = 127 ] || grep -q 'error while loading shared libraries' "$R/$name.plain.err"; then
        row "$name" "\`${*##*/}\`" "not run: $(grep -o 'lib[a-z]*\.so[.0-9]*' "$R/$name.plain.err" | head -1) missing"
        note "$name: not run (a library is missing)"
        return
    fi
    local a b same n=0 k=0 v
    if [ -n "$cmp" ]; then
        a=$(sed -n "$cmp" "$R/$name.plain.json")
        b=$(sed -n "$cmp" "$R/$name.shim.json")
    else
        a=$(cat "$R/$name.plain.json")
        b=$(cat "$R/$name.shim.json")
    fi
    [ "$a" = "$b" ] && [ -n "$a" ] && [ $rc1 = 0 ] && [ $rc2 = 0 ] && same=yes || same=NO
    n=$(ops "$tr")
    local ok=1
    case $expect in
    eqjson) k=$(jf "$R/$name.plain.json" launches); [ "$(allops "$tr")" = "$k" ] || ok=0; v="program's launches $k, trace operators $(allops "$tr")" ;;
    eq:*) k=${expect#eq:}; [ "$(allops "$tr")" = "$k" ] || ok=0; v="program's launches $k, trace operators $(allops "$tr")" ;;
    ge:*) k=${expect#ge:}; [ "$n" -ge "$k" ] || ok=0; v="at least $k kernels expected, trace kernels $n" ;;
    prof) k=$(jf "$R/$name.shim.json" kernels); [ "$n" = "$k" ] || ok=0; v="profiler (CUPTI) kernels $k, trace kernels $n" ;;
    *) v="trace kernels $n" ;;
    esac
    local u
    u=$(unknown_eps "$R/$name.shim.err")
    [ "${u:-0}" = 0 ] || ok=0
    local verdict="output identical: $same; $v; POS_DEBUG unknown entry points: ${u:-0}"
    if [ "$same" != yes ] || [ $ok = 0 ]; then
        fail_check
        verdict="**FAIL** $verdict (exit $rc1/$rc2)"
    fi
    row "$name" "\`$(echo "$*" | sed "s|$ROOT/||g; s|$T|\$T|g")\`" "$verdict; $(summary "$tr")"
    note "$name: $verdict"
}

if part intercept 75 "1. Interception"; then
    if [ $SIM = 1 ]; then
        md "Dry run: posapp (driver API, module text of the simulated driver) stands in for the" \
            "CUDA-runtime programs and PyTorch, which the simulated driver cannot run. Identical output" \
            "means the same \`requests\`, \`launches\` and \`verified\` (timings differ by nature)."
        keep='s/.*\("requests":[0-9]*,"launches":[0-9]*\).*\("verified":[a-z]*\).*/\1 \2/p'
        icheck posapp_verify "$keep" eqjson "$APP" --model resnet18 --requests 20 --verify
        icheck posapp_ptds "$keep" eqjson "$APP" --model resnet18 --requests 20 --verify --ptds
        icheck posapp_threads "$keep" eqjson "$APP" --model resnet18 --requests 80 --verify --streams 4 --threads 2
        icheck resnet50_b1 "$keep" eqjson "$APP" --model resnet50 --requests 100
    else
        # only these two programs get the toolkit's libraries (PyTorch keeps its own)
        LLP=LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUDA_LIBS
        icheck cudart_static "" eq:2020 "$TB/launches" 2000 20
        icheck cudart_shared "" eq:2020 env "$LLP" "$TB/launches_shared" 2000 20
        icheck cudart_ptds "" eq:2020 "$TB/launches_ptds" 2000 20
        icheck cublas_gemm "" ge:200 env "$LLP" "$TB/gemm" 200
        if [ $HAVE_TORCH = 1 ]; then
            icheck torch_convnet 's/.*"checksum":"\([^"]*\)".*/\1/p' prof \
                "$PY" "$ROOT/tests/gpu/torch_bench.py" --model convnet --batch 8 --iters 20 --warmup 0 --profile
            if [ $HAVE_TV = 1 ]; then
                icheck torch_resnet50 's/.*"checksum":"\([^"]*\)".*/\1/p' prof \
                    "$PY" "$ROOT/tests/gpu/torch_bench.py" --model resnet50 --batch 1 --iters 10 --warmup 0 --profile
            else
                row torch_resnet50 - "torchvision not installed: not checked"
            fi
            icheck torch_bert 's/.*"checksum":"\([^"]*\)".*/\1/p' prof \
                "$PY" "$ROOT/tests/gpu/torch_bench.py" --model bert --batch 8 --iters 5 --warmup 0 --profile
        else
            row torch - "PyTorch with CUDA not available: not checked"
        fi
    fi
    md "" "| check | command | result |" "|---|---|---|"
    printf '%s' "$ROWS" >>"$BODY"
    # launch cost: alternate, 5 runs each, medians of the runs' medians
    p=() s=() q=()
    for i in 1 2 3 4 5; do
        if [ $SIM = 1 ]; then
            runc mb.plain.$i 30 "$APP" --microbench 20000
            runc mb.shim.$i 30 env "LD_PRELOAD=$SHIM" POS_MODE=passthrough "$APP" --microbench 20000
        else
            runc mb.plain.$i 30 "$APP" --real --microbench 20000
            runc mb.shim.$i 30 env "LD_PRELOAD=$SHIM" POS_MODE=passthrough "$APP" --real --microbench 20000
        fi
        p+=("$(jf "$R/mb.plain.$i.json" launch_ns_p50)")
        s+=("$(jf "$R/mb.shim.$i.json" launch_ns_p50)")
    done
    if posd_up priority; then
        for i in 1 2 3; do
            runc mb.posd.$i 30 env "LD_PRELOAD=$SHIM" "POS_SOCKET=$SOCK" "$APP" "${REAL[@]}" --microbench 20000
            q+=("$(jf "$R/mb.posd.$i.json" launch_ns_p50)")
        done
        posd_down
    fi
    md "" "Launch cost (\`posapp ${REAL[*]:+--real }--microbench 20000\`: one \`cuLaunchKernel\` of an empty kernel, median of each run's median):" \
        "no shim $(med "${p[@]}") ns, shim in passthrough $(med "${s[@]}") ns, under posd priority (alone) $(med "${q[@]}") ns" \
        "(runs: ${p[*]} | ${s[*]} | ${q[*]})."
    # device times (shim/devtime.c): a resnet50 run under the shim with a marker and its timing
    # event behind every launch; on the simulated driver its device end times against the
    # device's own (POS_SIM_TRACE), on a GPU checked for order (no device end before its submit)
    dtr=$T/devtime.trace dsim=$T/devtime.sim
    runc devtime 60 env "LD_PRELOAD=$SHIM" POS_MODE=passthrough POS_SAMPLE=1 "POS_TRACE=$dtr" \
        "POS_SIM_TRACE=$dsim" "$APP" "${REAL[@]}" --model resnet50 --requests 50
    read -r dn dm db dbad dx dmax <<<"$(awk -v sim="$([ $SIM = 1 ] && echo "$dsim")" '
        BEGIN {if (sim != "") while ((getline l < sim) > 0) {split(l, f, " "); if (f[1] == "kernel") end[++ne] = f[3]}}
        /^#/ {next}
        {n++}
        $12 == "device" {d++; if ($11 + 0 < $10 + 0) bad++
            if (sim != "" && n <= ne) {e = ($11 - end[n]) / 1000; if (e < 0) e = -e; if (e <= 2) x++; if (e > m) m = e}}
        $12 == "marker" {mk++}
        $12 == "bound" {b++}
        END {printf "%d %d %d %d %s %s", d, mk, b, bad, sim != "" ? x + 0 : "-", sim != "" ? sprintf("%.1f", m) : "-"}' "$dtr")"
    dsum=$(summary "$dtr")
    if [ "${dn:-0}" -gt 0 ] && [ "${dbad:-1}" = 0 ] && { [ $SIM = 0 ] || [ "${dx:-0}" -ge $((dn * 99 / 100)) ]; }; then
        dverdict="device times: $dn, poll times $dm, bounds $db; device end before submit: $dbad"
    else
        fail_check
        dverdict="**FAIL** device times: ${dn:-0}, poll times ${dm:-0}, bounds ${db:-0}; device end before submit: ${dbad:-?}"
    fi
    [ $SIM = 1 ] && dverdict+="; within 2 us of the simulated device's end: $dx (largest error $dmax us)"
    md "" "Device times (\`POS_SAMPLE=1 POS_TRACE posapp ${REAL[*]:+--real }--model resnet50 --requests 50\`, every launch sampled, a timing event behind each marker): $dverdict. Summary: $dsum."
    note "devtime: $dverdict"
    if [ $SIM = 0 ] && [ -x "$TB/microbench" ]; then
        p=() s=()
        for i in 1 2 3; do
            runc rmb.plain.$i 30 "$TB/microbench" 20000
            runc rmb.shim.$i 30 env "LD_PRELOAD=$SHIM" POS_MODE=passthrough "$TB/microbench" 20000
            p+=("$(sed -n 's/launch_ns_p50 //p' "$R/rmb.plain.$i.json")")
            s+=("$(sed -n 's/launch_ns_p50 //p' "$R/rmb.shim.$i.json")")
        done
        md "Runtime API (\`tests/gpu/microbench.cu\`, \`<<<>>>\` launches): no shim $(med "${p[@]}") ns, shim $(med "${s[@]}") ns (runs: ${p[*]} | ${s[*]})."
    fi
fi

# --- 2. overhead ------------------------------------------------------------------------------
if part overhead 110 "2. Overhead: ResNet-50 throughput with and without pos"; then
    if [ $SIM = 0 ] && [ $HAVE_TV = 0 ]; then
        md "torchvision not installed: skipped."
    else
        REPS=3 SECS=1.2
        [ $SIM = 1 ] && REPS=2 SECS=0.4
        declare -A thr lat
        for rep in $(seq $REPS); do
            for c in none shim fifo priority; do
                cfg_up $c || continue
                if [ $SIM = 1 ]; then
                    for b in 1 32; do
                        wl resnet50 $b $SECS
                        runc ovh.$c.$rep.b$b 30 env $(cfg_env $c) POS_APP=ovh "${W[@]}"
                    done
                    for b in 1 32; do
                        thr[$c.$b]+="$(awk -v r="$(jf "$R/ovh.$c.$rep.b$b.json" throughput_rps)" -v b=$b 'BEGIN {printf "%.1f", r * b}') "
                        lat[$c.$b]+="$(jf "$R/ovh.$c.$rep.b$b.json" p50_ms) "
                    done
                else
                    wl resnet50 1,32 $SECS
                    runc ovh.$c.$rep 45 env $(cfg_env $c) POS_APP=ovh "${W[@]}"
                    for l in 1 2; do
                        b=$(jf "$R/ovh.$c.$rep.json" batch $l)
                        [ -n "$b" ] || continue
                        thr[$c.$b]+="$(jf "$R/ovh.$c.$rep.json" items_per_s $l) "
                        lat[$c.$b]+="$(jf "$R/ovh.$c.$rep.json" p50_ms $l) "
                    done
                fi
                cfg_down
            done
        done
        if [ $SIM = 0 ]; then
            sums=$(cat "$R"/ovh.*.json 2>/dev/null | grep -o '"batch":[0-9]*\|"checksum":"[^"]*"' | paste -d' ' - - | sort -u)
            nb=$(echo "$sums" | awk '{print $1}' | sort -u | wc -l)
            if [ "$(echo "$sums" | wc -l)" = "$nb" ]; then
                md "" "Outputs: each batch's checksum is the same in every run and configuration ($(echo $sums))."
            else
                fail_check
                md "" "**FAIL** outputs differ between runs or configurations: $(echo $sums)"
            fi
        fi
        md "" "Closed loop, one process, ${SECS} s measured per batch after warm-up; $REPS repetitions," \
            "configurations alternating within each. Items/s = requests/s x batch." "" \
            "| batch | configuration | items/s (median) | spread (min-max) | vs no shim | p50 ms (median) |" \
            "|---|---|---|---|---|---|"
        for b in 1 32; do
            base=$(med ${thr[none.$b]:-})
            for c in none shim fifo priority; do
                m=$(med ${thr[$c.$b]:-})
                md "| $b | $c | $m | $(spread ${thr[$c.$b]:-}) | $(ratio "$m" "$base") | $(med ${lat[$c.$b]:-}) |"
            done
        done
    fi
fi

# --- 3. isolation -------------------------------------------------------------------------------
if part isolation 95 "3. Isolation: a latency client beside a batch client"; then
    if [ $SIM = 0 ] && [ $HAVE_TV = 0 ]; then
        md "torchvision not installed: skipped."
    else
        D=6
        [ $SIM = 1 ] && D=1.5
        md "Latency client \`POS_APP=lat-r50\`: ResNet-50 batch 1, closed loop (class latency, the default);" \
            "batch client \`POS_APP=batch-r50\`: ResNet-50 batch 32, closed loop (a rule puts \`batch-*\` in class batch)." \
            "Both run for the same ${D} s window (started together after warm-up; each ends with its first request past it)." "" \
            "| scenario | latency p50 ms | latency p99 ms | p99 / alone | batch items/s |" "|---|---|---|---|---|"
        solo99=
        iso() { # scenario: alone | none | fifo | priority | mps | mps+priority
            local sc=$1 c=none
            case $sc in fifo | priority | mps+priority) c=${sc#mps+} ;; esac
            case $sc in mps*) mps_up || { md "| $sc | MPS unavailable | | | |"; return; } ;; esac
            cfg_up $c || { case $sc in mps*) mps_down ;; esac; return; }
            go_reset
            local names=(lat)
            if [ $sc != alone ]; then
                wl resnet50 32 $D batch
                bgc iso.$sc.batch 45 env $(cfg_env $c) POS_APP=batch-r50 "${W[@]}"
                names+=(batch)
            fi
            wl resnet50 1 $D lat
            bgc iso.$sc.lat 45 env $(cfg_env $c) POS_APP=lat-r50 "${W[@]}"
            go "${names[@]}"
            bgwait
            cfg_down
            case $sc in mps*) mps_down ;; esac
            local p50 p99 bt=-
            p50=$(jf "$R/iso.$sc.lat.json" p50_ms)
            p99=$(jf "$R/iso.$sc.lat.json" p99_ms)
            [ $sc = alone ] && solo99=$p99
            if [ $sc != alone ]; then
                bt=$(jf "$R/iso.$sc.batch.json" items_per_s)
                [ -n "$bt" ] || bt=$(awk -v r="$(jf "$R/iso.$sc.batch.json" throughput_rps)" 'BEGIN {if (r != "") printf "%.1f", r * 32}')
            fi
            [ -n "$p99" ] || fail_check
            md "| $sc | ${p50:-**FAIL**} | ${p99:-**FAIL**} | $(ratio "$p99" "$solo99") | ${bt:--} |"
            note "isolation $sc: p99 ${p99:-?} ms, batch ${bt:-?} items/s"
        }
        for sc in alone none fifo priority mps mps+priority; do iso $sc; done
        md "" "MPS: $MPS."
    fi
fi

# --- 4. co-location ------------------------------------------------------------------------------
if part coloc 80 "4. Co-location: ResNet-18 + 34 + 50 as three processes"; then
    if [ $SIM = 0 ] && [ $HAVE_TV = 0 ]; then
        md "torchvision not installed: skipped."
    else
        N=300
        [ $SIM = 1 ] && N=200
        MODELS=(resnet18 resnet34 resnet50)
        md "Each process: batch 1, $N requests closed loop after warm-up (all three start together)." \
            "Speedup = the three solo durations added up / the makespan together. GPU utilisation: the mean" \
            "of \`nvidia-smi --query-gpu=utilization.gpu -lms 200\` from the start to the end of the measured requests." "" \
            "| scenario | resnet18 p50 ms | resnet34 p50 ms | resnet50 p50 ms | makespan s | speedup | GPU util |" "|---|---|---|---|---|---|---|"
        # window NAME...: the first start and the last end of the clients (their own times when
        # they give them, else the wall clock around them)
        seqsum=0 seqrow="" sequtil=""
        for m in "${MODELS[@]}"; do
            go_reset
            wl $m 1 iters:$N $m
            a=$(date +%s.%N)
            bgc coloc.seq.$m 45 "${W[@]}"
            go $m
            util_start coloc.seq.$m
            bgwait
            b=$(date +%s.%N)
            u=$(util_stop coloc.seq.$m)
            ts=$(jf "$R/coloc.seq.$m.json" t_start)
            te=$(jf "$R/coloc.seq.$m.json" t_end)
            [ -n "$ts" ] || { ts=$a; te=$b; }
            d=$(awk -v a="$ts" -v b="$te" 'BEGIN {printf "%.3f", b - a}')
            seqsum=$(awk -v s="$seqsum" -v d="$d" 'BEGIN {printf "%.3f", s + d}')
            seqrow+="$(jf "$R/coloc.seq.$m.json" p50_ms) | "
            sequtil+="${sequtil:+ / }$u"
        done
        md "| one after another | ${seqrow}$seqsum | 1 | ${sequtil:-} |"
        coloc() { # scenario: none | mps | fifo | priority
            local sc=$1 c=none
            case $sc in fifo | priority) c=$sc ;; esac
            if [ $sc = mps ]; then mps_up || { md "| mps | MPS unavailable | | | | | |"; return; }; fi
            cfg_up $c || return
            go_reset
            local a b m
            a=$(date +%s.%N)
            for m in "${MODELS[@]}"; do
                wl $m 1 iters:$N $m
                bgc coloc.$sc.$m 60 env $(cfg_env $c) POS_APP=co-$m "${W[@]}"
            done
            go "${MODELS[@]}"
            util_start coloc.$sc
            bgwait
            b=$(date +%s.%N)
            local u
            u=$(util_stop coloc.$sc)
            cfg_down
            [ $sc = mps ] && mps_down
            local ts te p50s="" span
            ts=$(for m in "${MODELS[@]}"; do jf "$R/coloc.$sc.$m.json" t_start; done | sort -g | head -1)
            te=$(for m in "${MODELS[@]}"; do jf "$R/coloc.$sc.$m.json" t_end; done | sort -g | tail -1)
            [ -n "$ts" ] || { ts=$a; te=$b; }
            span=$(awk -v a="$ts" -v b="$te" 'BEGIN {printf "%.3f", b - a}')
            for m in "${MODELS[@]}"; do
                p50s+="$(jf "$R/coloc.$sc.$m.json" p50_ms) | "
                [ -n "$(jf "$R/coloc.$sc.$m.json" p50_ms)" ] || fail_check
            done
            md "| all at once: $sc | ${p50s}$span | $(ratio "$seqsum" "$span") | $u |"
            note "co-location $sc: makespan $span s, speedup $(ratio "$seqsum" "$span")"
        }
        for sc in none mps fifo priority; do coloc $sc; done
        [ $SIM = 1 ] && md "" "Dry run: makespans are the wall clock around the three posapp processes; no NVML, so no utilisation."
        md "" "MPS: $MPS."
    fi
fi

# --- 5. calibration -------------------------------------------------------------------------------
if part calib 50 "5. Calibration: posapp${REAL[*]:+ --real} against possim's h200 preset"; then
    NREQ=200
    if [ $SIM = 1 ]; then
        md "Dry run: posapp on the simulated driver (h200 preset, time-sliced) against possim's h200" \
            "preset: the two device models in real and in virtual time, not the hardware."
    else
        md "posapp --real: each model's ops as synthetic kernels (its FLOPs as FP32 FMAs, its bytes as" \
            "loads, its grid, block and shared memory; tools/posapp_real.cu) on the GPU, against possim" \
            "with one client of the same model (policy none, time-sliced h200 preset)."
    fi
    possim_p50() { # scenario-file client -> p50_ms
        grep -E "^ +$2 " "$R/$(basename "$1" .ini).possim.txt" 2>/dev/null | awk '{print $7}'
    }
    md "" "Solo latency, batch 1, $NREQ requests closed loop (p50, ms):" "" \
        "| model | device p50 | possim p50 | possim / device - 1 |" "|---|---|---|---|"
    errs=()
    for f in "$POS_MODELS_DIR"/*.model; do
        m=$(basename "$f" .model)
        runc cal.$m 30 "$APP" "${REAL[@]}" --model "$m" --requests $NREQ
        printf '[device]\npreset = h200\nmode = timeslice\n[sched]\npolicy = none\n[client %s]\nmodel = %s\nrequests = %s\n' \
            "$m" "$m" $NREQ >"$T/cal-$m.ini"
        runc cal-$m.possim 60 "$POSSIM" "$T/cal-$m.ini"
        mv "$R/cal-$m.possim.json" "$R/cal-$m.possim.txt"
        dev=$(jf "$R/cal.$m.json" p50_ms)
        sim=$(possim_p50 "$T/cal-$m.ini" "$m")
        if [ -z "$dev" ]; then
            fail_check
            dev="**FAIL** $(head -1 "$R/cal.$m.err" | cut -c1-120)"
        fi
        e=$(awk -v s="$sim" -v d="$dev" 'BEGIN {if (s + 0 > 0 && d + 0 > 0) printf "%+.1f %%", (s / d - 1) * 100; else print "-"}')
        errs+=("$(awk -v s="$sim" -v d="$dev" 'BEGIN {if (s + 0 > 0 && d + 0 > 0) {e = (s / d - 1) * 100; printf "%.2f", e < 0 ? -e : e}}')")
        md "| $m | ${dev:--} | ${sim:--} | $e |"
    done
    md "" "Median absolute error: $(med "${errs[@]}") %."
    # co-run: three posapp processes at once, against possim's three clients
    printf '[device]\npreset = h200\nmode = timeslice\n[sched]\npolicy = none\n' >"$T/cal-corun.ini"
    for m in resnet18 resnet34 resnet50; do
        printf '[client %s]\nmodel = %s\nrequests = %s\n' "$m" "$m" $((NREQ * 3 / 2)) >>"$T/cal-corun.ini"
        bgc cal.corun.$m 60 "$APP" "${REAL[@]}" --model $m --requests $((NREQ * 3 / 2))
    done
    bgwait
    runc cal-corun.possim 60 "$POSSIM" "$T/cal-corun.ini"
    mv "$R/cal-corun.possim.json" "$R/cal-corun.possim.txt"
    md "" "Co-run slowdown (p50 together / p50 alone; three processes started together, time-sliced):" "" \
        "| model | device slowdown | possim slowdown | possim / device - 1 |" "|---|---|---|---|"
    for m in resnet18 resnet34 resnet50; do
        ds=$(ratio "$(jf "$R/cal.corun.$m.json" p50_ms)" "$(jf "$R/cal.$m.json" p50_ms)")
        ss=$(ratio "$(possim_p50 "$T/cal-corun.ini" $m)" "$(possim_p50 "$T/cal-$m.ini" $m)")
        md "| $m | $ds | $ss | $(awk -v s="$ss" -v d="$ds" 'BEGIN {if (s + 0 > 0 && d + 0 > 0) printf "%+.1f %%", (s / d - 1) * 100; else print "-"}') |"
    done
    md "" "The co-run's start is not aligned (posapp has no start barrier), so the first and last requests of each run alone; p50 is robust to that."
fi
part_end

# --- 6. memory ----------------------------------------------------------------------------------
if part memory 45 "6. Memory limits: the ledger under a real CUDA program"; then
    MEMPROG=$TB/memload
    LIM=$((2 * 1024 * 1024 * 1024))
    md "posd with a rule \`mem_limit = 2G\` for the apps \`mem-*\`; \`memload\` (tests/shim/prog_memload.c) under the shim" \
        "fills 64 MiB blocks by each allocation path until it is refused. Pass: it holds at most the" \
        "limit, the refusal is CUDA_ERROR_OUT_OF_MEMORY (2), cuMemGetInfo's total is the limit."
    if [ ! -x "$MEMPROG" ]; then
        md "" "**FAIL**: $MEMPROG missing (tests/gpu/build.sh builds it)."
        fail_check
    elif cfg_up priority; then
        menv=(env "LD_PRELOAD=$SHIM" POS_MODE=scheduled "POS_SOCKET=$SOCK")
        md "" "| path | held (MiB) | refused with | cuMemGetInfo total (MiB) | verdict |" "|---|---|---|---|---|"
        for p in linear pitched managed async pool vmm array; do
            runc mem.$p 40 "${menv[@]}" POS_APP=mem-$p "$MEMPROG" fill $p 67108864 1000
            held=$(grep -m1 '^held_bytes ' "$R/mem.$p.json" | cut -d' ' -f2)
            rc=$(grep -m1 '^refused ' "$R/mem.$p.json" | cut -d' ' -f2)
            tot=$(grep -m1 '^info_total ' "$R/mem.$p.json" | cut -d' ' -f2)
            v=pass
            if [ -z "$held" ] || [ "$held" -gt $LIM ] || [ "$rc" != 2 ] || [ "$tot" != $LIM ]; then
                v="**FAIL** $(head -1 "$R/mem.$p.err" | cut -c1-100)"
                fail_check
            fi
            md "| $p | $(( ${held:-0} / 1048576 )) | ${rc:--} | $(( ${tot:-0} / 1048576 )) | $v |"
        done
        runc mem.profile 30 "${menv[@]}" POS_APP=mem-vllm "$MEMPROG" profile 268435456
        fb=$(grep -m1 '^free_before ' "$R/mem.profile.json" | cut -d' ' -f2)
        fa=$(grep -m1 '^free_after ' "$R/mem.profile.json" | cut -d' ' -f2)
        v=pass
        { [ -n "$fb" ] && [ "$fb" = "$fa" ]; } || { v="**FAIL**"; fail_check; }
        md "" "vLLM-like profiling run (256 MiB used and freed): cuMemGetInfo free before $fb, after $fa: $v."
        # what the ledger says one holding client uses, against the driver's own per-process
        # figure (NVML through nvidia-smi): context and module memory are measured, not guessed
        mkfifo "$T/memhold.in"
        echo "MEMLOAD_HOLD=1 POS_APP=mem-hold memload fill linear 268435456 2 <fifo &" >>"$CMDS"
        MEMLOAD_HOLD=1 timeout 40 "${menv[@]}" POS_APP=mem-hold "$MEMPROG" fill linear 268435456 2 \
            <"$T/memhold.in" >"$R/mem.hold.json" 2>"$R/mem.hold.err" &
        hold_pid=$!
        exec 7>"$T/memhold.in"
        for _ in $(seq 500); do grep -q holding "$R/mem.hold.json" 2>/dev/null && break; sleep 0.02; done
        POSSTAT=$ROOT/$GPU/bin/posstat
        "$POSSTAT" -s "$SOCK" -o json >"$R/mem.posstat.json" 2>&1
        used=$(grep -o '"mem_used_bytes":[0-9]*' "$R/mem.posstat.json" | head -1 | cut -d: -f2)
        smi=-
        if [ $SIM = 0 ]; then
            smi=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
                awk -F', *' -v p="$(pgrep -P "$hold_pid" -f memload | head -1)" '$1 == p {print $2}')
        fi
        exec 7>&-
        wait "$hold_pid" 2>/dev/null
        md "" "A client holding 512 MiB: the ledger (posstat mem_used) says $(( ${used:-0} / 1048576 )) MiB;" \
            "NVML's per-process figure (nvidia-smi --query-compute-apps) ${smi} MiB$([ $SIM = 1 ] && echo ' (no NVML in the dry run)')."
        if [ $SIM = 0 ] && [ "$HAVE_TORCH" = 1 ]; then
            # cuMemGetInfo and NVML in one process under the limit: they must agree
            cat >"$T/meminfo.py" <<'PY'
import ctypes, json, torch
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
class M(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
nvml = ctypes.CDLL("libnvidia-ml.so.1")
nvml.nvmlInit_v2()
h = ctypes.c_void_p()
nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
m = M()
rc = nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
print(json.dumps({"cuda_free": free, "cuda_total": total, "nvml_rc": rc, "nvml_total": m.total, "nvml_free": m.free, "nvml_used": m.used}))
PY
            runc mem.torch 60 "${menv[@]}" POS_APP=mem-torch "$PY" "$T/meminfo.py"
            ct=$(jf "$R/mem.torch.json" cuda_total)
            nt=$(jf "$R/mem.torch.json" nvml_total)
            nf=$(jf "$R/mem.torch.json" nvml_free)
            cf=$(jf "$R/mem.torch.json" cuda_free)
            v=pass
            { [ "$ct" = $LIM ] && [ "$nt" = "$ct" ] && [ "$nf" = "$cf" ]; } || { v="**FAIL**"; fail_check; }
            md "" "PyTorch under the limit: torch.cuda.mem_get_info() total $ct free $cf; NVML nvmlDeviceGetMemoryInfo total $nt free $nf: $v."
        fi
        cfg_down
    fi
fi
part_end

# --- the report ---------------------------------------------------------------------------------
posd_down
wall=$(elapsed)
REPORT=$OUTDIR/gpu-h200.md
{
    if [ $SIM = 1 ]; then
        echo "# pos on a GPU: simulated dry run"
        echo
        echo "**Simulated dry run.** Every figure below comes from the simulated driver"
        echo "(\`build/sim/libcuda.so.1\`, \`POS_SIM_DEVICE=h200\`) and posapp's models, not from hardware:"
        echo "it proves the suite's logic, not pos on a GPU. The real run is \`bash tests/gpu/run.sh OUTDIR\`"
        echo "on the GPU machine (docs/gpu.md)."
    else
        echo "# pos on a real GPU: $GPUNAME"
    fi
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| date | $(date -u +'%Y-%m-%d %H:%M UTC') |"
    echo "| GPU | $GPUNAME |"
    echo "| driver | $DRIVER |"
    echo "| CUDA toolkit | ${NVCC_V:-none} (\`$CUDA_HOME\`) |"
    if [ $SIM = 1 ]; then
        echo "| PyTorch | not used in the dry run (posapp models stand in) |"
    else
        echo "| PyTorch | $TORCH (CUDA $TORCH_CUDA); torchvision $TV |"
    fi
    echo "| MPS | $MPS |"
    echo "| host | $(nproc) cores, $(uname -r) |"
    if git rev-parse --short HEAD >/dev/null 2>&1; then
        echo "| commit | $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)') |"
    else
        echo "| commit | unknown here (no .git); the carried build's is below |"
    fi
    echo "| command | \`bash tests/gpu/run.sh OUTDIR$([ $SIM = 1 ] && echo ' --sim')\`, carried build \`$GPU\` ($(head -1 "$GPU/MANIFEST" 2>/dev/null | sed 's/^# //')) |"
    echo "| took | ${wall} s of a ${BUDGET} s budget |"
    echo "| verdict | $([ $fail = 0 ] && echo 'every check passed' || echo '**some checks FAILED** (see below)') |"
    cat "$BODY"
    echo
    echo "Raw output (every JSON line, stderr, posd log, shim traces, possim reports): \`raw.tar.gz\`."
} >"$REPORT"
cp "$T"/*.trace "$R"/ 2>/dev/null
cp "$T"/*.ini "$R"/ 2>/dev/null
cp "$GPU/MANIFEST" "$R"/ 2>/dev/null
tar -C "$T" -czf "$OUTDIR/raw.tar.gz" raw
note "wrote $REPORT ($(du -sh "$OUTDIR/raw.tar.gz" | cut -f1) raw); $([ $fail = 0 ] && echo passed || echo FAILED)"
trap - EXIT
cleanup
rm -rf "$T"
exit $fail
