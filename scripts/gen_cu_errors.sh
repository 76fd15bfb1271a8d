#!/usr/bin/env bash
# Generates the CUresult name/description table of the simulated driver from the CUDA
# toolkit's own cuda.h, so every real error code is known by name.
# Usage: gen_cu_errors.sh CUDA_H OUT_H
set -euo pipefail
awk '
/typedef enum cudaError_enum/ { inside = 1; next }
inside && /}[ \t]*CUresult;/ { inside = 0 }
!inside { next }
/\/\*\*/ { doc = ""; indoc = 1 }
indoc {
    line = $0
    gsub(/^[ \t]*\/?\*+\/?[ \t]?/, "", line); gsub(/\*\/[ \t]*$/, "", line)
    gsub(/::/, "", line); gsub(/\\[a-z]+ ?/, "", line); gsub(/"/, "\\\"", line)
    if (line != "") doc = doc (doc == "" ? "" : " ") line
}
/\*\// { indoc = 0; next }
/^[ \t]*CUDA_[A-Z0-9_]+[ \t]*=[ \t]*[0-9]+/ {
    name = $1; sub(/[ \t=].*/, "", name)
    first = doc; n = index(first, ". "); if (n > 0) first = substr(first, 1, n)
    if (length(first) > 200) first = substr(first, 1, 197) "..."
    printf "    {%s, \"%s\", \"%s\"},\n", name, name, first
    doc = ""
}
' "$1" > "$2.tmp"
mv "$2.tmp" "$2"
