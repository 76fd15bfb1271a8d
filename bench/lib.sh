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

# The simulated driver's completion lag for possim's [device] notify_us: the simulated driver
# learns of an op's end when its agent thread wakes, and a thread blocked in a synchronisation
# returns when that agent wakes it (tens to hundreds of us on a busy 2-core machine, which a
# GPU does not have). A lone resnet18 on h200 without pos (short ops, so the lag shows), the
# median p50 of REPS runs, against possim's p50 with no lag. Prints "US REAL_MS SIM_MS": the
# lag in whole microseconds, then the two p50s it came from.
notify_us_calibrate() { # reps instance-prefix
    local r real=() sim
    for ((r = 0; r < $1; r++)); do
        real+=("$(POS_SIM_INSTANCE=$2-$r POS_SIM_DEVICE=h200 POS_SIM_MODE=mps $APP --model resnet18 --requests 200 |
            sed -n 's/.*"p50_ms":\([^,}]*\).*/\1/p')")
        rm -f "/dev/shm/pos-sim.$(id -u).$2-$r"
    done
    sim=$(printf '[device]\npreset = h200\nmode = mps\n[sched]\npolicy = none\n[client a]\nmodel = resnet18\nrequests = 200\n' |
        $POSSIM -o json /dev/stdin | sed -n 's/.*"p50_ms":\([^,}]*\).*/\1/p' | head -1)
    printf '%s\n' "${real[@]}" | sort -g | awk -v s="$sim" '{a[NR] = $1} END {
        m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        d = (m - s) * 1000; printf "%.0f %s %s\n", (d > 0 ? d : 0), m, s}'
}
