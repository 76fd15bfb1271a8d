#!/usr/bin/env bash
# Makes sure the Debian packages and CUDA headers that pos builds against are present.
# As root it installs what is missing; otherwise it prints the exact command to run.
# Usage: scripts/deps.sh            (check, install as root)
#        CUDA_HOME=/opt/cuda scripts/deps.sh
#        scripts/deps.sh --hashcat  (only Debian's hashcat, ~100 MB, for tests/integration/test_hashcat.c)
set -euo pipefail

# libclang-rt-14-dev: libFuzzer and the sanitizer runtimes for the fuzz targets (make fuzz, and
# briefly in make test); cppcheck, clang-tidy: make check-static; valgrind: make memcheck
packages=(build-essential clang llvm pkg-config libbpf-dev bpftool libelf-dev zlib1g-dev
          liburing-dev libcunit1-dev libinih-dev libmicrohttpd-dev libclang-rt-14-dev cppcheck
          clang-tidy valgrind)
only_optional=0
if [ "${1:-}" = "--hashcat" ]; then
    packages=(hashcat)
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
    echo "deps: pos needs the CUDA 12+ toolkit headers (no GPU needed). Install the CUDA toolkit" >&2
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
