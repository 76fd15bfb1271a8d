/* Recorded events: which stream and which point of the client's launch order each event's
 * last record stands for, so that a cuEventSynchronize or a successful cuEventQuery tells posd
 * exactly which operators are complete. A direct-mapped table with a per-slot sequence lock:
 * no lock, no allocation; a collision or a race only forgets an event (its synchronisation
 * then bounds nothing, as before). */
#include "shim/shim.h"

#define EVENT_SLOTS 4096

struct event_slot {
    _Atomic uint32_t version; /* odd while being written */
    uint64_t event;
    struct shim_event_mark m;
};

static struct event_slot slots[EVENT_SLOTS];

static struct event_slot *slot_of(uint64_t event)
{
    uint64_t h = event * 0x9e3779b97f4a7c15ull;
    return &slots[(h >> 40) & (EVENT_SLOTS - 1)];
}

static void write_slot(uint64_t event, const struct shim_event_mark *m)
{
    struct event_slot *s = slot_of(event);
    uint32_t v = atomic_load_explicit(&s->version, memory_order_relaxed);
    if ((v & 1) || !atomic_compare_exchange_strong_explicit(
                       &s->version, &v, v + 1, memory_order_acquire, memory_order_relaxed))
        return; /* another writer is here: forget this record */
    s->event = event;
    s->m = *m;
    /* the fields are complete before a reader can see the even version */
    atomic_store_explicit(&s->version, v + 2, memory_order_release);
}

void shim_event_recorded(uint64_t event, const struct shim_event_mark *m)
{
    write_slot(event, m);
}

void shim_event_forget(uint64_t event)
{
    struct shim_event_mark none = {0};
    if (slot_of(event)->event == event)
        write_slot(0, &none);
}

int shim_event_lookup(uint64_t event, struct shim_event_mark *m)
{
    struct event_slot *s = slot_of(event);
    uint32_t v = atomic_load_explicit(&s->version, memory_order_acquire);
    if (v & 1)
        return 0;
    uint64_t e = s->event;
    *m = s->m;
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->version, memory_order_relaxed) != v || e != event || !m->covers)
        return 0;
    return 1;
}
