#!/usr/bin/env bash
# Real-GPU checks of libposshim.so (needs an NVIDIA GPU, its driver, nvcc; PyTorch optional).
# Builds the shim with gcc alone (no Debian packages needed), then for CUDA-runtime programs
# (legacy and per-thread default stream, with a captured graph) and a PyTorch script checks
# that outputs are identical with and without the shim and that every launch is in the trace,
# and measures what the shim adds per launch. Writes a report to $OUT (or docs/results).
#
#   bash tests/gpu/run.sh            # report: $OUT/gpu-shim.md, else docs/results/gpu-shim.md
set -u
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
REPORT_DIR=${OUT:-docs/results}
T=$(mktemp -d)
REPORT=$REPORT_DIR/gpu-shim.md
fail=0
rows=""

note() { echo "gpu: $*" >&2; }
row() { rows+="| $1 | $2 | $3 |"$'\n'; }

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$gpu" ]; then
    note "no NVIDIA GPU visible (nvidia-smi): nothing to check"
    exit 2
fi

note "building the shim and the check programs"
gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -fPIC -shared -fvisibility=hidden -pthread -I. -Iinclude \
    -I"$CUDA_HOME/include" -Wl,-Bsymbolic-functions -o "$T/libposshim.so" shim/*.c -ldl || exit 1
"$CUDA_HOME/bin/nvcc" -O2 tests/gpu/launches.cu -o "$T/launches" || exit 1
"$CUDA_HOME/bin/nvcc" -O2 --default-stream per-thread tests/gpu/launches.cu -o "$T/launches_ptds" ||
    exit 1
"$CUDA_HOME/bin/nvcc" -O2 tests/gpu/microbench.cu -o "$T/microbench" || exit 1

ops() { grep -vc '^#' "$1"; }
summary() { grep '^# summary' "$1" | sed 's/^# summary //'; }

# check NAME CMD...: same stdout with and without the shim, trace lines = "launches N"
check() {
    local name=$1; shift
    local plain shimmed trace=$T/$name.trace
    plain=$("$@" 2>"$T/$name.plain.err")
    local rc1=$?
    shimmed=$(LD_PRELOAD=$T/libposshim.so POS_TRACE=$trace "$@" 2>"$T/$name.shim.err")
    local rc2=$?
    local launches seen same
    launches=$(sed -n 's/^launches \([0-9]*\)$/\1/p' <<<"$plain")
    seen=$(ops "$trace" 2>/dev/null || echo 0)
    [ "$plain" = "$shimmed" ] && [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && same=yes || same=NO
    local verdict="output identical: $same; launches $launches, trace operators $seen"
    [ "$same" = yes ] && [ "$seen" = "$launches" ] || { fail=1; verdict="**FAIL** $verdict"; }
    row "$name" "\`$*\`" "$verdict; $(summary "$trace" 2>/dev/null)"
    note "$name: $verdict"
}

check runtime_legacy "$T/launches" 2000 20
check runtime_ptds "$T/launches_ptds" 2000 20

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    plain=$(python3 tests/gpu/torch_check.py 20 2>"$T/torch.plain.err")
    shimmed=$(LD_PRELOAD=$T/libposshim.so POS_TRACE=$T/torch.trace python3 tests/gpu/torch_check.py 20 \
        2>"$T/torch.shim.err")
    seen=$(ops "$T/torch.trace" 2>/dev/null || echo 0)
    names=$(grep -v '^#' "$T/torch.trace" 2>/dev/null | awk '{print $4}' | sort | uniq -c | sort -rn |
        head -5 | awk '{printf "%s x%s; ", $2, $1}')
    if [ "$plain" = "$shimmed" ] && [ "$seen" -gt 0 ]; then
        v="output identical: yes; trace operators $seen; top kernels: $names"
    else
        fail=1
        v="**FAIL** output identical: $([ "$plain" = "$shimmed" ] && echo yes || echo NO); trace operators $seen"
    fi
    row torch "\`python3 tests/gpu/torch_check.py 20\`" "$v $(summary "$T/torch.trace" 2>/dev/null)"
    note "torch: $v"
else
    row torch "-" "PyTorch with CUDA not available: not checked"
fi

# launch cost: alternate, 5 runs each, medians of the runs' medians
p=() s=()
for i in 1 2 3 4 5; do
    p+=("$("$T/microbench" 20000 | sed -n 's/launch_ns_p50 //p')")
    s+=("$(LD_PRELOAD=$T/libposshim.so "$T/microbench" 20000 | sed -n 's/launch_ns_p50 //p')")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(med "${p[@]}")
ms=$(med "${s[@]}")

mkdir -p "$REPORT_DIR"
cat >"$REPORT" <<EOF
# libposshim.so on a real GPU

**Real GPU:** $gpu (nvidia-smi: name, driver). Produced by \`bash tests/gpu/run.sh\` on
$(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), CUDA from
$CUDA_HOME ($("$CUDA_HOME/bin/nvcc" --version | tail -1)).

| check | command | result |
|---|---|---|
$rows
Launch cost (runtime API, empty kernel, \`tests/gpu/microbench.cu\`, median of 5 runs' medians):
no shim $mp ns, shim in passthrough $ms ns per launch (runs: ${p[*]} | ${s[*]}).
EOF
note "wrote $REPORT"
# on the lent device machine, bring the traces back as evidence
[ -n "${OUT:-}" ] && cp "$T"/*.trace "$OUT"/ 2>/dev/null
rm -rf "$T"
exit $fail
