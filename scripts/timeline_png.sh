#!/usr/bin/env bash
# Renders a Chrome trace-event JSON timeline (possim --timeline, postrace) to a PNG in
# headless Chromium (Debian's chromium package), offline: the trace is inlined into
# scripts/timeline_view.html, a small canvas viewer. Perfetto's UI is a web page that needs
# the network, and chrome://tracing needs a person to load the file, so neither is used here.
# Usage: scripts/timeline_png.sh TRACE.json OUT.png [TITLE]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 TRACE.json OUT.png [TITLE]" >&2; exit 2; }
trace=$1 out=$2 title=${3:-$(basename "$1")}
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "timeline_png: no chromium: apt-get install chromium (or make deps-timeline as root)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
    printf '<script>window.TITLE="%s";window.TRACE=' "$(printf '%s' "$title" | sed 's/[\\"<]/ /g')"
    cat "$trace"
    printf ';</script>\n'
    cat "$here/timeline_view.html"
} > "$tmp/view.html"
rows=$(grep -c '"thread_name"' "$trace" || true)
height=$(( 90 + ${rows:-1} * 60 )) # the viewer needs about 30-50 px a track
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$tmp/profile" --window-size=1600,$height \
    --screenshot="$tmp/shot.png" "file://$tmp/view.html" >"$tmp/log" 2>&1 || {
    cat "$tmp/log" >&2; exit 1; }
mv "$tmp/shot.png" "$out"
echo "timeline_png: $out"
