#!/usr/bin/env bash
# The carried build: posd, posstat, possim, posapp, libposshim.so and posapp's synthetic
# kernels (posapp_real.fatbin), built here into one folder that runs on a GPU machine which
# has glibc, the NVIDIA driver and nothing of this project's Debian build dependencies.
# liburing and libinih are linked statically (Debian's liburing.a, libinih.a); posapp is
# linked against the toolkit's stub libcuda.so, so it needs only the machine's real
# libcuda.so.1; the shim finds the driver with dlsym/dlopen as it always does. The fatbin is
# built with nvcc for sm_90 (the H200), so nothing on the GPU machine needs a compiler.
#
#   bash tests/gpu/build.sh [DIR]       # default build/gpu; `make gpu-build` runs it
#
# Layout (as `make install` lays out a prefix, so posapp and possim find the models by
# themselves): bin/{posd,posstat,possim,posapp,posapp_real.fatbin}, lib/libposshim.so,
# share/pos/models/*.model, and MANIFEST: what each binary needs (NEEDED, ldd) and the newest
# glibc symbol version it asks for.
set -eu
cd "$(dirname "$0")/../.."
DIR=${1:-build/gpu}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-cc}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
ARCHS=${POS_GPU_ARCHS:-90} # sm_XX list, space separated; the H200 is sm_90
LIBDIR=$($CC -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
static_lib() { # NAME: the path of libNAME.a, or fail
    local p
    for p in "/usr/lib/$LIBDIR/lib$1.a" "/usr/lib/lib$1.a" "/usr/local/lib/lib$1.a"; do
        [ -f "$p" ] && { echo "$p"; return; }
    done
    echo "gpu-build: lib$1.a not found (Debian: apt-get install lib$1-dev)" >&2
    exit 1
}
URING_A=$(static_lib uring)
INIH_A=$(static_lib inih)

CFLAGS="-O2 -g -std=gnu11 -fPIC -pthread -Wall -Wextra -Wno-unused-parameter"
CPPFLAGS="-D_GNU_SOURCE -Iinclude -I. -I$CUDA_HOME/include"
O=$DIR/obj
rm -rf "$DIR"
mkdir -p "$O" "$DIR/bin" "$DIR/lib" "$DIR/share/pos/models"

# compile SRC... into $O, echo the objects (EXTRA: extra flags, e.g. -fvisibility=hidden)
objs() {
    local extra=$1 s o list=()
    shift
    for s in "$@"; do
        o=$O/$(echo "${s%.c}" | tr / _)$extra_tag.o
        $CC $CPPFLAGS $CFLAGS $extra -c "$s" -o "$o"
        list+=("$o")
    done
    echo "${list[@]}"
}
extra_tag=""
# without eBPF telemetry: the carried posd links nothing beyond glibc (docs/telemetry.md)
POSD_SRCS=$(ls sched/*.c sched/policy/*.c | grep -v '^sched/telemetry\.c$')
MODEL_SRCS="sim/gpu_model.c sim/device_presets.c sim/model_file.c sim/request.c"
echo "gpu-build: posd"
# without libmicrohttpd (its static form drags in GnuTLS): no --metrics; posstat -o prom is there;
# without the kubelet's pod-resources client (protobuf-c and nghttp2 are not on the device):
# pod identity from the kubelet's files alone
$CC -o "$DIR/bin/posd" $(objs "-DPOS_NO_METRICS -DPOS_NO_PODRES" $POSD_SRCS) $(objs "-DPOS_NO_METRICS -DPOS_NO_BPF" sched/telemetry.c) \
    "$URING_A" "$INIH_A" -pthread -lm
echo "gpu-build: posstat"
$CC -o "$DIR/bin/posstat" $(objs "" tools/posstat.c tools/posstat_format.c tools/posclient.c \
    tools/posstat_nvml.c sched/metrics_text.c sched/mem_limit.c) -ldl
echo "gpu-build: posctl"
$CC -o "$DIR/bin/posctl" $(objs "" tools/posctl.c tools/posstat_format.c tools/posclient.c kube/cdi.c kube/edits.c \
    sched/mem_limit.c)
echo "gpu-build: possim"
$CC -o "$DIR/bin/possim" $(objs "" tools/possim.c tools/possim_scenario.c tools/possim_sim.c tools/possim_host.c tools/timeline.c \
    tools/possim_search.c tools/possim_train.c tools/possim_sac.c sched/core.c sched/profile.c \
    sched/profile_file.c sched/ini_lines.c sched/schedule.c sched/schedule_file.c sched/nn.c \
    sched/weights.c sched/weights_file.c sched/policy/*.c $MODEL_SRCS tools/posapp_arrival.c \
    tools/posapp_stats.c) "$INIH_A" -lm
echo "gpu-build: posapp"
$CC -o "$DIR/bin/posapp" $(objs "" tools/posapp*.c sim/model_file.c sim/request.c) \
    -L"$CUDA_HOME/lib64/stubs" -lcuda -lm -pthread
echo "gpu-build: libposshim.so"
extra_tag=.shim
$CC -shared -Wl,-soname,libposshim.so -Wl,-Bsymbolic-functions -Wl,-z,defs \
    -o "$DIR/lib/libposshim.so" $(objs -fvisibility=hidden shim/*.c) -ldl -pthread
extra_tag=""

if ! [ -x "$NVCC" ]; then
    # without nvcc the folder still serves the dry run (tests/gpu/run.sh --sim), not a GPU
    echo "gpu-build: no nvcc at $NVCC: posapp_real.fatbin and the CUDA check programs are not built (the dry run does not need them; a GPU run does)" >&2
    NVCC=
fi
if [ -n "$NVCC" ]; then
echo "gpu-build: posapp_real.fatbin (sm_$ARCHS)"
gencode=()
for a in $ARCHS; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
# PTX of the newest arch too, so a newer GPU can JIT it
last=${ARCHS##* }
gencode+=(-gencode "arch=compute_$last,code=compute_$last")
"$NVCC" -fatbin -O3 "${gencode[@]}" -o "$DIR/bin/posapp_real.fatbin" tools/posapp_real.cu

# the suite's CUDA check programs, so the GPU machine compiles nothing: cudart static (nvcc's
# default) and shared, legacy and per-thread default stream, the launch-cost microbenchmark
# and a cuBLAS GEMM loop (libcudart.so.13 and libcublas.so.13 come from the machine's toolkit)
echo "gpu-build: CUDA check programs"
T=$DIR/bin/tests
mkdir -p "$T"
"$NVCC" -O2 "${gencode[@]}" tests/gpu/launches.cu -o "$T/launches"
"$NVCC" -O2 "${gencode[@]}" -cudart shared tests/gpu/launches.cu -o "$T/launches_shared"
"$NVCC" -O2 "${gencode[@]}" --default-stream per-thread tests/gpu/launches.cu -o "$T/launches_ptds"
"$NVCC" -O2 "${gencode[@]}" tests/gpu/microbench.cu -o "$T/microbench"
"$NVCC" -O2 "${gencode[@]}" tests/gpu/gemm.cu -o "$T/gemm" -lcublas
fi

# the memory part's allocation program (a plain driver-API program: no nvcc needed)
mkdir -p "$DIR/bin/tests"
$CC $CPPFLAGS $CFLAGS tests/shim/prog_memload.c -o "$DIR/bin/tests/memload" -L"$CUDA_HOME/lib64/stubs" -lcuda -pthread
cp sim/models/*.model "$DIR/share/pos/models/"
rm -rf "$O"

# what each binary needs
{
    echo "# tests/gpu/build.sh, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
    echo "# built on: $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME"), $(ldd --version | head -1)"
    for b in bin/posd bin/posstat bin/possim bin/posapp lib/libposshim.so bin/tests/launches \
        bin/tests/launches_shared bin/tests/gemm; do
        [ -e "$DIR/$b" ] || { echo "## $b: not built"; continue; }
        echo "## $b: NEEDED $(readelf -d "$DIR/$b" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
        echo "   newest glibc symbol version: $(objdump -T "$DIR/$b" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
        ldd "$DIR/$b" 2>&1 | sed 's/ (0x[0-9a-f]*)//; s/^/   ldd: /'
    done
    [ -n "$NVCC" ] && echo "## posapp_real.fatbin: $(stat -c %s "$DIR/bin/posapp_real.fatbin") bytes, $("$NVCC" --version | tail -1)"
} >"$DIR/MANIFEST"
cat "$DIR/MANIFEST"
echo "gpu-build: $(du -sh "$DIR" | cut -f1) in $DIR"
