#!/usr/bin/env bash
# make check-static: cppcheck and clang-tidy over the C sources of the products (sched, shim,
# sim, tools, kube), both as errors. The checks and every exception, with its reason: .clang-tidy
# and .cppcheck-suppressions at the top of the tree. Usage: scripts/check-static.sh [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
files=("$@")
[ ${#files[@]} -gt 0 ] ||
    mapfile -t files < <(git ls-files 'sched/*.c' 'shim/*.c' 'sim/*.c' 'tools/*.c' 'kube/*.c')
flags=(-D_GNU_SOURCE -Iinclude -I. -Ibuild/gen -Ibuild/gen/kube -I"$CUDA_HOME/include")
# sched/telemetry.c includes the eBPF skeleton the build generates (bpftool's code: a system
# header to clang-tidy, which then judges only ours), or is built without it (make: BPF_CFLAGS)
tidy_flags=()
if [ -f build/bpf/telemetry.skel.h ]; then tidy_flags+=(-isystem build/bpf); else
    tidy_flags+=(-DPOS_NO_BPF); fi
# the simulated driver's generated tables (scripts/gen_cu_*.sh), which its sources include
[ -f build/gen/cu_errors.h ] && [ -f build/gen/cu_exports.h ] ||
    make -s build/gen/cu_errors.h build/gen/cu_exports.h
# kube/ includes protoc-c's generated headers, which check the version of the system's
# protobuf-c.h; cppcheck reads no system header, so it is given the two numbers they compare
pbc=/usr/include/protobuf-c/protobuf-c.h
pbc_flags=()
[ -f $pbc ] && pbc_flags=(-DPROTOBUF_C_VERSION_NUMBER="$(awk '/define PROTOBUF_C_VERSION_NUMBER/ {print $3}' $pbc)"
    -DPROTOBUF_C_MIN_COMPILER_VERSION="$(awk '/define PROTOBUF_C_MIN_COMPILER_VERSION/ {print $3}' $pbc)")
echo "check-static: cppcheck $(cppcheck --version | cut -d' ' -f2), ${#files[@]} files"
cppcheck -q --enable=warning,performance,portability --std=c11 "${flags[@]}" "${pbc_flags[@]}" \
    --suppress=missingIncludeSystem --suppressions-list=.cppcheck-suppressions --inline-suppr \
    --library=scripts/cppcheck-libbpf.cfg \
    --error-exitcode=1 -j"$(nproc)" "${files[@]}"
echo "check-static: clang-tidy $(clang-tidy --version | sed -n 's/.*version \([0-9.]*\).*/\1/p' | head -n 1)"
out=$(clang-tidy -quiet "${files[@]}" -- "${flags[@]}" "${tidy_flags[@]}" -std=gnu11 2>&1) || true
# bpftool's generated skeleton (build/bpf/*.skel.h, which sched/telemetry.c includes) is not
# ours to fix: the analyzer takes its error path for a leak because it does not know that
# bpf_object__destroy_skeleton frees the skeleton. Its findings are counted, not failed on.
skel=$(grep -cE '^build/bpf/[^:]*\.skel\.h:[0-9]+:[0-9]+: (warning|error):' <<<"$out" || true)
[ "$skel" -gt 0 ] && echo "check-static: $skel clang-tidy finding(s) in bpftool's generated skeleton, not ours (see this script)"
out=$(awk '/^[^ ]+:[0-9]+:[0-9]+: (warning|error):/ {skip = $0 ~ /^build\/bpf\/[^:]*\.skel\.h:/} !skip' <<<"$out")
if grep -qE 'warning:|error:' <<<"$out"; then
    grep -E 'warning:|error:' -A3 <<<"$out"
    echo "check-static: clang-tidy findings above (fix them, or add the check's exception with its reason to .clang-tidy)"
    exit 1
fi
echo "check-static: clean"
