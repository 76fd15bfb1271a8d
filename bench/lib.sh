# Helpers the benchmarks share (sourced): start and stop a posd on $POS_SOCKET with the
# configuration $T/posd.conf, its output in $T/posd.log (never in a caller's $(...)).
POSD_PID=
posd_up() { # policy
    rm -f "$POS_SOCKET"
    # a fresh state directory each time: no run starts with what an earlier one learnt
    POSD_STATE_DIR=$(mktemp -d "$T/state.XXXXXX") \
        $POSD -f -c "$T/posd.conf" -p "$1" >>"$T/posd.log" 2>&1 &
    POSD_PID=$!
    for _ in $(seq 150); do [ -S "$POS_SOCKET" ] && return; sleep 0.02; done
    echo "bench: posd did not come up (log: $T/posd.log)" >&2
    exit 1
}
posd_down() { # [-SIGNAL]
    kill "${1:--TERM}" "$POSD_PID" 2>/dev/null || true
    wait "$POSD_PID" 2>/dev/null || true
    POSD_PID=
}
