#!/usr/bin/env bash
# Makes sure the Debian packages and CUDA headers that pos builds against are present.
# As root it installs what is missing; otherwise it prints the exact command to run.
# Usage: scripts/deps.sh            (check, install as root: everything the targets of the
#                                    Makefile need, but the two optional sets below)
#        CUDA_HOME=/opt/cuda scripts/deps.sh
#        scripts/deps.sh --hashcat  (only Debian's hashcat, ~100 MB, for tests/integration/test_hashcat.c;
#                                    make deps-hashcat)
#        scripts/deps.sh --chromium (only Debian's chromium, ~250 MB, for scripts/timeline_png.sh;
#                                    make deps-timeline)
#        scripts/deps.sh --podman   (only Debian's podman 4.3, ~50 MB with crun and conmon, for
#                                    the container part of tests/integration/test_posctl_cdi.c;
#                                    make deps-podman)
#        scripts/deps.sh --need TARGET CMD=PACKAGE...  (a make target's check: for each CMD
#                                    not on PATH, one line naming the Debian package; exit 1)
set -euo pipefail

if [ "${1:-}" = "--need" ]; then
    target=$2
    shift 2
    absent=()
    for need in "$@"; do
        cmd=${need%%=*}
        if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "$cmd" ]; then
            absent+=("$need")
        fi
    done
    [ ${#absent[@]} -eq 0 ] && exit 0
    for need in "${absent[@]}"; do
        echo "make $target: needs ${need%%=*}, which is not installed: apt-get install ${need#*=} (as root, scripts/deps.sh installs it)" >&2
    done
    exit 1
fi

# The default set: building (build-essential, clang, llvm, pkg-config, the -dev libraries;
# libbpf-dev, bpftool, libelf-dev and zlib1g-dev for posd's eBPF telemetry); make test
# (libcunit1-dev; libclang-rt-14-dev: libFuzzer and the sanitizer runtimes of the fuzz targets;
# python3: the model generator's check; python3-jsonschema and python3-yaml: the CDI spec's
# schema check and the Kubernetes manifests' checks, tests/kube/; python3-grpcio and
# python3-protobuf: the fake kubelet); building the device plugin (protobuf-c-compiler,
# libprotobuf-c-dev, libnghttp2-dev); make check-static (cppcheck, clang-tidy); make
# memcheck and make bench (valgrind; time: /usr/bin/time for bench/shim.sh's peak RSS;
# python3 for the benchmarks' tables); make format (clang-format).
packages=(build-essential clang llvm pkg-config libbpf-dev bpftool libelf-dev zlib1g-dev
          liburing-dev libcunit1-dev libinih-dev libmicrohttpd-dev libclang-rt-14-dev cppcheck
          clang-tidy valgrind time python3 python3-jsonschema python3-yaml clang-format
          protobuf-c-compiler libprotobuf-c-dev libnghttp2-dev python3-grpcio python3-protobuf)
only_optional=0
if [ "${1:-}" = "--hashcat" ]; then
    packages=(hashcat)
    only_optional=1
elif [ "${1:-}" = "--chromium" ]; then
    packages=(chromium)
    only_optional=1
elif [ "${1:-}" = "--podman" ]; then
    packages=(podman)
    only_optional=1
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "deps: installing missing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/pos-deps.log 2>&1; then
            apt-get update >>/tmp/pos-deps.log 2>&1 || true
            if ! apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/pos-deps.log 2>&1; then
                echo "deps: apt-get install failed; see /tmp/pos-deps.log" >&2
                tail -n 20 /tmp/pos-deps.log >&2
                exit 1
            fi
        fi
    else
        echo "deps: missing Debian packages: ${missing[*]}" >&2
        echo "deps: install them with:  sudo apt-get install -y ${missing[*]}" >&2
        echo "deps: (or run 'make test' as root, which installs them itself)" >&2
        exit 1
    fi
fi

[ "$only_optional" -eq 1 ] && exit 0

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_home/include/cuda.h" ]; then
    echo "deps: $cuda_home/include/cuda.h not found." >&2
    echo "deps: pos needs the CUDA 13 toolkit headers (no GPU needed). Install the CUDA toolkit" >&2
    echo "deps: from https://developer.nvidia.com/cuda-downloads (the cuda-toolkit or cuda-cudart-dev package)," >&2
    echo "deps: then run make with CUDA_HOME=/path/to/cuda if it is not /usr/local/cuda." >&2
    exit 1
fi
if [ ! -f "$cuda_home/lib64/stubs/libcuda.so" ]; then
    echo "deps: $cuda_home/lib64/stubs/libcuda.so not found (the link stub for -lcuda programs)." >&2
    echo "deps: it ships with the CUDA toolkit; point CUDA_HOME at a full toolkit." >&2
    exit 1
fi
exit 0
