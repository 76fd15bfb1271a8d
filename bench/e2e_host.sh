#!/usr/bin/env bash
# What each part of possim's host model does to its agreement with the real runs, possim only
# (no process runs): bench/e2e.sh with REAL_FROM on the real runs recorded in
# docs/results/e2e.md, once per variant of [host] keys. Writes docs/results/e2e-host.md:
# figures within ±15 % of real per variant, and every figure's possim / real per variant.
#
#   bash bench/e2e_host.sh                    (make bench-e2e-host runs it)
#   VARIANTS="slice_us = 0|slice_us = 3000" OUT=/tmp/h.md bash bench/e2e_host.sh
#                                             variants split by '|', keys within by ','
set -euo pipefail
cd "$(dirname "$0")/.."
VARIANTS=${VARIANTS:-cores = unlimited|device_us = 0, slice_us = 0|device_us = 0|slice_us = 0|agent_us = 0|(defaults)|slice_us = 3000}
REAL=${REAL:-docs/results/e2e.md}
OUT=${OUT:-docs/results/e2e-host.md}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
[ -e build/possim ] || { echo "bench-e2e-host: build first (make)" >&2; exit 1; }
IFS='|' read -ra vs <<<"$VARIANTS"
summary= hdr="| case | figure |" sep="|---|---|" cols=()
for i in "${!vs[@]}"; do
    v=${vs[$i]}
    keys=$([ "$v" = "(defaults)" ] || sed 's/, */\n/g' <<<"$v")
    echo "bench-e2e-host: $v" >&2
    line=$(HOST_KEYS="$keys" REAL_FROM=$REAL OUT=$T/$i.md bash bench/e2e.sh 2>&1 | tail -1)
    n=$(sed -n 's/.*(\([0-9]* of [0-9]*\) within.*/\1/p' <<<"$line")
    notify=$(sed -n 's/.*`\[device\] notify_us = *\([0-9]*\)`.*/\1/p' <(tr '\n' ' ' <"$T/$i.md"))
    summary+="| \`$v\` | $n | $notify |
"
    grep '^| ' "$T/$i.md" | grep -v '^| case\|^|---' | awk -F' [|] ' '{print $1 " | " $2 "\t" $7}' >"$T/$i.rows"
    [ "$i" = 0 ] && cut -f1 "$T/$i.rows" >"$T/keys"
    cut -f2 "$T/$i.rows" >"$T/$i.q"
    cols+=("$T/$i.q")
    hdr+=" \`$v\` |" sep+="---|"
done
{
    cat <<EOH
# possim's host model, part by part, against the real runs

**Simulated GPU, both sides: every figure here is simulated.** Produced by
\`$(if [ "$OUT" = docs/results/e2e-host.md ]; then echo "make bench-e2e-host"; else echo "VARIANTS=\"$VARIANTS\" OUT=$OUT bash bench/e2e_host.sh"; fi)\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- . ':!docs' 2>/dev/null || echo ' (with uncommitted changes)'):
possim only (\`bench/e2e.sh\` with \`REAL_FROM=$REAL\`), against the real runs recorded in
[$(basename "$REAL")]($(basename "$REAL")) (not rerun), once per variant of possim's \`[host]\`
keys (docs/possim.md, *The host*); \`(defaults)\` is possim as it ships. Each variant's
\`notify_us\` is calibrated again against the recorded real p50 of a lone client, as
bench/e2e.sh does. \`cores = unlimited\`: no host model; \`device_us = 0\`: no device process
and no driver agents (the earlier model); \`slice_us = 0\`: the cores shared fluidly instead of
in time slices; \`agent_us = 0\`: the device process without the agents.

| variant | figures within ±15 % of real | notify_us |
|---|---|---|
$summary
possim / real per figure:

$hdr
$sep
EOH
    paste "$T/keys" "${cols[@]}" | awk -F'\t' '{printf "%s", $1; for (i = 2; i <= NF; i++) printf " | %s", $i; print " |"}'
} >"$OUT"
echo "bench-e2e-host: wrote $OUT" >&2
