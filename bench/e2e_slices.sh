#!/usr/bin/env bash
# Does possim's host model meet the real runs better with time slices? possim only (no process
# runs): bench/e2e.sh with REAL_FROM on the real runs recorded in docs/results/e2e.md, once per
# [host] slice_us of SLICES (0: the fluid model, possim's default). Writes
# docs/results/e2e-slices.md: figures within ±15 % of real per slice, and every figure's
# possim / real per slice.
#
#   bash bench/e2e_slices.sh                  (make bench-e2e-slices runs it)
#   SLICES="0 1500" OUT=/tmp/s.md bash bench/e2e_slices.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SLICES=${SLICES:-0 20 100 750 1500 3000}
REAL=${REAL:-docs/results/e2e.md}
OUT=${OUT:-docs/results/e2e-slices.md}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
[ -e build/possim ] || { echo "bench-e2e-slices: build first (make)" >&2; exit 1; }
summary=
for sl in $SLICES; do
    echo "bench-e2e-slices: slice_us = $sl" >&2
    line=$(HOST_KEYS="slice_us = $sl" REAL_FROM=$REAL OUT=$T/$sl.md bash bench/e2e.sh 2>&1 | tail -1)
    n=$(sed -n 's/.*(\([0-9]* of [0-9]*\) within.*/\1/p' <<<"$line")
    summary+="| $sl | $n |
"
    grep '^| ' "$T/$sl.md" | grep -v '^| case\|^|---' | awk -F' [|] ' '{print $1 " | " $2 "\t" $7}' >"$T/$sl.rows"
done
hdr="| case | figure |" sep="|---|---|"
paste_args=()
first=
for sl in $SLICES; do
    hdr+=" slice $sl |" sep+="---|"
    if [ -z "$first" ]; then first=$sl; cut -f1 "$T/$sl.rows" >"$T/keys"; fi
    cut -f2 "$T/$sl.rows" >"$T/$sl.q"
    paste_args+=("$T/$sl.q")
done
{
    cat <<EOH
# possim's host model with time slices against the real runs

**Simulated GPU, both sides: every figure here is simulated.** Produced by
\`$(if [ "$OUT" = docs/results/e2e-slices.md ]; then echo "make bench-e2e-slices"; else echo "SLICES=\"$SLICES\" OUT=$OUT bash bench/e2e_slices.sh"; fi)\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- . ':!docs' 2>/dev/null || echo ' (with uncommitted changes)'):
possim only (\`bench/e2e.sh\` with \`REAL_FROM=$REAL\`), against the real runs and the
\`notify_us\` recorded in [$(basename "$REAL")]($(basename "$REAL")) (not rerun), once per \`[host]
slice_us\` (docs/possim.md, *The host*): 0 is the fluid model (possim's default); otherwise each
core runs one task at a time in slices of that length, as EEVDF gives them (Linux 6.18 here:
its base slice is 0.75 ms x (1 + log2 of the CPUs, at most 8), 1.5 ms on this 2-core machine).

| slice_us | figures within ±15 % of real |
|---|---|
$summary
possim / real per figure:

$hdr
$sep
EOH
    paste "$T/keys" "${paste_args[@]}" | awk -F'\t' '{printf "%s", $1; for (i = 2; i <= NF; i++) printf " | %s", $i; print " |"}'
} >"$OUT"
echo "bench-e2e-slices: wrote $OUT" >&2
