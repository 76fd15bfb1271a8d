/* Unit tests of the rules the shim, posd's engine and possim share (include/pos/rules.h) and of
 * the grant accessors of the shared memory (include/pos/client_shm.h): when a launch may go,
 * which launch gets a marker of its own, which waits help, the sample followed, the collector's
 * sleeps and what it holds back, what posd publishes, and the order posd reads a client in. */
#include "tests/cunit_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pos/client_shm.h"
#include "pos/psi.h"
#include "pos/rules.h"

static struct pos_grant_view view(uint32_t mode, uint64_t granted, uint32_t window, uint64_t done)
{
    return (struct pos_grant_view){
        .mode = mode, .granted = granted, .window = window, .done = done};
}

/* ---- grants ------------------------------------------------------------------------------- */

static void test_a_free_grant_lets_every_launch_go(void)
{
    CU_ASSERT(pos_grant_allows(view(POS_GRANT_FREE, 0, 0, 0), 1));
    CU_ASSERT(pos_grant_allows(view(POS_GRANT_FREE, 5, 2, 3), 1000000));
}

static void test_a_launch_within_the_grant_goes_and_the_next_waits(void)
{
    struct pos_grant_view g = view(POS_GRANT_WINDOW, 10, 0, 0);
    CU_ASSERT(pos_grant_allows(g, 1));
    CU_ASSERT(pos_grant_allows(g, 10));
    CU_ASSERT(!pos_grant_allows(g, 11));
    CU_ASSERT(!pos_grant_allows(view(POS_GRANT_WINDOW, 0, 0, 0), 1)); /* as registered */
}

/* The window cap lets a client run ahead of posd's grant over its own completed prefix, and
 * only with a cap set: without one the prefix does not matter. */
static void test_a_launch_within_the_window_over_the_reported_prefix_goes(void)
{
    struct pos_grant_view g = view(POS_GRANT_WINDOW, 10, 4, 20);
    CU_ASSERT(pos_grant_allows(g, 24));
    CU_ASSERT(!pos_grant_allows(g, 25));
    CU_ASSERT(pos_grant_allows(g, 10)); /* the grant still counts */
    CU_ASSERT(!pos_grant_allows(view(POS_GRANT_WINDOW, 10, 0, 20), 11));
}

static void test_the_last_launch_a_grant_allows_gets_a_marker(void)
{
    /* no window: the launch that reaches the grant */
    struct pos_grant_view g = view(POS_GRANT_WINDOW, 10, 0, 7);
    CU_ASSERT(!pos_grant_last(g, 9));
    CU_ASSERT(pos_grant_last(g, 10));
    /* a window: the launch that fills it, whatever the grant */
    g = view(POS_GRANT_WINDOW, 100, 2, 7);
    CU_ASSERT(!pos_grant_last(g, 8));
    CU_ASSERT(pos_grant_last(g, 9));
    /* the mode is the caller's to know: a FREE grant's numbers are still looked at */
    CU_ASSERT(pos_grant_last(view(POS_GRANT_FREE, 3, 0, 0), 3));
}

/* ---- waiting ------------------------------------------------------------------------------- */

static void test_a_wait_is_for_a_window_step_only_under_a_window_cap(void)
{
    CU_ASSERT(pos_wait_for_step(view(POS_GRANT_WINDOW, 10, 2, 0)));
    CU_ASSERT(!pos_wait_for_step(view(POS_GRANT_WINDOW, 10, 0, 0)));
    CU_ASSERT(!pos_wait_for_step(view(POS_GRANT_FREE, 10, 2, 0)));
}

/* Waits for a window step help while such waits have been short; long ones help one time in
 * POS_HELP_PROBE, counted over every long one; other waits never help and are not counted. */
static void test_short_step_waits_help_and_long_ones_one_in_sixteen(void)
{
    _Atomic uint32_t long_waits = 0;
    CU_ASSERT(pos_wait_helps(1, 59999, 60000, &long_waits));
    CU_ASSERT_EQUAL(atomic_load(&long_waits), 0);
    CU_ASSERT(!pos_wait_helps(0, 0, 60000, &long_waits));
    CU_ASSERT_EQUAL(atomic_load(&long_waits), 0);
    int helped = 0;
    for (int i = 0; i < 3 * POS_HELP_PROBE; i++)
        helped += pos_wait_helps(1, 60000, 60000, &long_waits);
    CU_ASSERT_EQUAL(helped, 3);
    CU_ASSERT_EQUAL(atomic_load(&long_waits), 3 * POS_HELP_PROBE);
    /* the first long wait is one of the probes */
    atomic_store(&long_waits, 0);
    CU_ASSERT(pos_wait_helps(1, 1000000, 60000, &long_waits));
    CU_ASSERT(!pos_wait_helps(1, 1000000, 60000, &long_waits));
}

static void test_the_helped_wait_average_weighs_the_last_wait_one_eighth(void)
{
    CU_ASSERT_EQUAL(pos_wait_avg(0, 80000), 10000);
    CU_ASSERT_EQUAL(pos_wait_avg(80000, 0), 70000);
    CU_ASSERT_EQUAL(pos_wait_avg(8000, 8000), 8000);
    uint64_t avg = 1000000;
    for (int i = 0; i < 200; i++)
        avg = pos_wait_avg(avg, 16000);
    CU_ASSERT(avg >= 16000 && avg < 16000 + 64);
}

/* ---- markers ------------------------------------------------------------------------------- */

static void test_the_sample_followed_is_the_smaller_unless_one_is_zero(void)
{
    CU_ASSERT_EQUAL(pos_sample_follow(32, 1), 1);
    CU_ASSERT_EQUAL(pos_sample_follow(32, 8), 8);
    CU_ASSERT_EQUAL(pos_sample_follow(8, 32), 8); /* posd never asks for fewer */
    CU_ASSERT_EQUAL(pos_sample_follow(32, 0), 32);
    CU_ASSERT_EQUAL(pos_sample_follow(0, 1), 0); /* POS_SAMPLE=0: no sampled markers at all */
}

static void test_a_marker_is_due_every_sample_launches(void)
{
    uint32_t until = 4;
    int due[12];
    for (int i = 0; i < 12; i++)
        due[i] = pos_marker_due(&until, 4);
    for (int i = 0; i < 12; i++)
        CU_ASSERT_EQUAL(due[i], i % 4 == 3);
    /* none at all with a sample of 0 */
    until = 0;
    for (int i = 0; i < 10; i++)
        CU_ASSERT(!pos_marker_due(&until, 0));
}

/* posd asking for markers more often takes effect at the next launch, not after the count
 * that the old sample started. */
static void test_a_lower_sample_takes_effect_at_once(void)
{
    uint32_t until = 32;
    CU_ASSERT(!pos_marker_due(&until, 32));
    CU_ASSERT(pos_marker_due(&until, 1));
    CU_ASSERT(pos_marker_due(&until, 1));
    until = 32;
    CU_ASSERT(!pos_marker_due(&until, 2));
    CU_ASSERT(pos_marker_due(&until, 2));
}

/* ---- the collector ------------------------------------------------------------------------- */

static void test_the_collector_is_prompt_while_posd_waits_on_completions(void)
{
    CU_ASSERT(pos_collector_prompt(1, 0));
    CU_ASSERT(pos_collector_prompt(0, 4));
    CU_ASSERT(!pos_collector_prompt(0, 0));
}

static void test_the_collector_polls_with_work_and_backs_off_when_idle(void)
{
    uint32_t idle = POS_IDLE_POLL_US;
    CU_ASSERT_EQUAL(pos_collector_sleep_ns(1, 1, 100000, 20000, &idle), 20000);
    CU_ASSERT_EQUAL(pos_collector_sleep_ns(1, 0, 100000, 20000, &idle), 100000);
    CU_ASSERT_EQUAL(pos_collector_sleep_ns(0, 1, 100000, 20000, &idle), 100000);
    uint64_t idle_ns[5];
    for (int i = 0; i < 5; i++)
        idle_ns[i] = pos_collector_sleep_ns(0, 0, 100000, 20000, &idle);
    CU_ASSERT_EQUAL(idle_ns[0], 2000000);
    CU_ASSERT_EQUAL(idle_ns[1], 4000000);
    CU_ASSERT_EQUAL(idle_ns[2], 8000000);
    CU_ASSERT_EQUAL(idle_ns[3], 8000000);
    CU_ASSERT_EQUAL(idle_ns[4], 8000000);
    /* work resets the back-off */
    CU_ASSERT_EQUAL(pos_collector_sleep_ns(0, 1, 100000, 20000, &idle), 100000);
    CU_ASSERT_EQUAL(pos_collector_sleep_ns(0, 0, 100000, 20000, &idle), 2000000);
}

/* A prompt collector on a host short of cores keeps its poll at a bounded share of a core:
 * with a cheap pass it polls at the prompt interval, with a 22 us pass (a slow host's wake-ups)
 * at 4 x 22 us, and never slower than its poll with work pending unless it was set so; with
 * cores to spare it polls at the prompt interval whatever its pass costs. */
static void test_a_prompt_collector_polls_no_faster_than_its_pass_allows(void)
{
    CU_ASSERT_EQUAL(pos_collector_prompt_ns(20000, 100000, 0, 1), 20000);
    CU_ASSERT_EQUAL(pos_collector_prompt_ns(20000, 100000, 3000, 1), 20000);
    CU_ASSERT_EQUAL(pos_collector_prompt_ns(20000, 100000, 22000, 1), 88000);
    CU_ASSERT_EQUAL(pos_collector_prompt_ns(20000, 100000, 60000, 1), 100000);
    CU_ASSERT_EQUAL(pos_collector_prompt_ns(300000, 100000, 0, 1), 300000); /* as set */
    CU_ASSERT_EQUAL(pos_collector_prompt_ns(20000, 100000, 22000, 0), 20000);
}

/* The host's pressure: the share of a 10 ms window some task waited (PSI's stall counter's
 * growth over the window's wall time); short of cores from 10 %, and assumed so until a whole
 * window was seen. */
static void test_the_host_is_short_of_cores_while_tasks_wait_a_tenth_of_the_time(void)
{
    struct pos_cpu_pressure p = {0};
    CU_ASSERT(pos_cpu_contended(&p));
    CU_ASSERT(pos_cpu_pressure_due(&p, 5));
    pos_cpu_pressure_take(&p, 1000000, 7000000);
    CU_ASSERT(pos_cpu_contended(&p)); /* no window yet */
    CU_ASSERT(!pos_cpu_pressure_due(&p, 1000000 + POS_PRESSURE_WINDOW_NS - 1));
    CU_ASSERT(pos_cpu_pressure_due(&p, 1000000 + POS_PRESSURE_WINDOW_NS));
    pos_cpu_pressure_take(&p, 11000000, 7000000 + 500000); /* 0.5 ms of 10 */
    CU_ASSERT_EQUAL(p.permille, 50);
    CU_ASSERT(!pos_cpu_contended(&p));
    pos_cpu_pressure_take(&p, 21000000, 7500000 + 1000000); /* 1 ms of 10 */
    CU_ASSERT_EQUAL(p.permille, 100);
    CU_ASSERT(pos_cpu_contended(&p));
    pos_cpu_pressure_take(&p, 31000000, 8500000 + 30000000); /* more than the window: capped */
    CU_ASSERT_EQUAL(p.permille, 1000);
}

/* The "some" line's total of /proc/pressure/cpu, and text that has none. */
static void test_the_cpu_stall_total_is_read_from_the_some_line(void)
{
    uint64_t us = 0;
    CU_ASSERT_EQUAL(pos_psi_some_total_us("some avg10=0.13 avg60=0.17 avg300=0.05 "
                                          "total=1879050054\nfull avg10=0.00 avg60=0.00 "
                                          "avg300=0.00 total=0\n",
                                          &us),
                    0);
    CU_ASSERT_EQUAL(us, 1879050054ull);
    CU_ASSERT_EQUAL(pos_psi_some_total_us("full avg10=0.00 total=5\nsome total=42", &us), 0);
    CU_ASSERT_EQUAL(us, 42);
    CU_ASSERT_EQUAL(pos_psi_some_total_us("full avg10=0.00 total=5\n", &us), -1);
    CU_ASSERT_EQUAL(pos_psi_some_total_us("some avg10=0.13\nfull total=5\n", &us), -1);
    CU_ASSERT_EQUAL(pos_psi_some_total_us("some total=x\n", &us), -1);
    CU_ASSERT_EQUAL(pos_psi_some_total_us("some total=12x\n", &us), -1);
    CU_ASSERT_EQUAL(pos_psi_some_total_us("", &us), -1);
}

/* A record's own marker is exact and final; a bound only bounds what nothing bounded yet. */
static void test_a_marker_is_final_and_the_first_bound_stays(void)
{
    CU_ASSERT(pos_done_takes(POS_DONE_UNKNOWN, POS_DONE_BOUND));
    CU_ASSERT(pos_done_takes(POS_DONE_UNKNOWN, POS_DONE_MARKER));
    CU_ASSERT(pos_done_takes(POS_DONE_BOUND, POS_DONE_MARKER));
    CU_ASSERT(!pos_done_takes(POS_DONE_BOUND, POS_DONE_BOUND));
    CU_ASSERT(!pos_done_takes(POS_DONE_MARKER, POS_DONE_MARKER));
    CU_ASSERT(!pos_done_takes(POS_DONE_MARKER, POS_DONE_BOUND));
}

static void test_a_record_waits_for_its_completion_and_its_own_marker(void)
{
    CU_ASSERT(pos_done_pending(POS_DONE_UNKNOWN, 0));
    CU_ASSERT(!pos_done_pending(POS_DONE_BOUND, 0));
    CU_ASSERT(pos_done_pending(POS_DONE_BOUND, 1)); /* its marker gives the exact time */
    CU_ASSERT(!pos_done_pending(POS_DONE_MARKER, 1));
}

static void test_a_sync_covering_every_launch_leaves_the_client_idle(void)
{
    CU_ASSERT(pos_sync_idles(7, 7));
    CU_ASSERT(!pos_sync_idles(6, 7)); /* another thread launched meanwhile */
}

/* ---- publishing ---------------------------------------------------------------------------- */

static struct pos_published decision(uint32_t mode, uint64_t granted, uint32_t window,
                                     uint32_t sample, uint32_t kick)
{
    return (struct pos_published){
        .mode = mode, .granted = granted, .window = window, .sample = sample, .kick_on_done = kick};
}

static void test_a_registered_client_waits_for_posd_with_a_marker_behind_every_launch(void)
{
    struct pos_published p = pos_published_init();
    CU_ASSERT_EQUAL(p.mode, POS_GRANT_WINDOW);
    CU_ASSERT_EQUAL(p.granted, 0);
    CU_ASSERT_EQUAL(p.window, 0);
    CU_ASSERT_EQUAL(p.sample, 1);
    CU_ASSERT_EQUAL(p.kick_on_done, 0);
    CU_ASSERT(!pos_grant_allows(pos_grant_view_of(&p, 0), 1));
}

static void test_posd_publishes_the_sample_and_kicks_always_and_the_grant_when_changed(void)
{
    struct pos_published p = pos_published_init();
    CU_ASSERT_EQUAL(pos_publish(&p, decision(POS_GRANT_WINDOW, 0, 0, 1, 0), 0), 0);
    /* a grant the decision did not change is not taken */
    CU_ASSERT_EQUAL(pos_publish(&p, decision(POS_GRANT_FREE, 9, 3, 1, 0), 0), 0);
    CU_ASSERT_EQUAL(p.mode, POS_GRANT_WINDOW);
    CU_ASSERT_EQUAL(p.granted, 0);
    CU_ASSERT_EQUAL(pos_publish(&p, decision(POS_GRANT_WINDOW, 9, 3, 32, 1), 0),
                    POS_PUB_SAMPLE | POS_PUB_KICK);
    CU_ASSERT_EQUAL(p.sample, 32);
    CU_ASSERT_EQUAL(p.kick_on_done, 1);
    CU_ASSERT_EQUAL(pos_publish(&p, decision(POS_GRANT_WINDOW, 9, 3, 32, 1), 1), POS_PUB_GRANT);
    CU_ASSERT_EQUAL(p.granted, 9);
    CU_ASSERT_EQUAL(p.window, 3);
    CU_ASSERT(pos_grant_allows(pos_grant_view_of(&p, 5), 8));
    CU_ASSERT(!pos_grant_allows(pos_grant_view_of(&p, 5), 10));
}

/* What posd writes into the shared memory is what a launching thread reads back; the
 * completion prefix is read only under a window cap, the only case a rule looks at it. */
static void test_a_thread_reads_the_grant_posd_published(void)
{
    struct pos_client_shm *shm = calloc(1, sizeof *shm);
    CU_ASSERT_FATAL(shm != NULL);
    struct pos_published p = pos_published_init();
    pos_shm_publish(shm, &p, POS_PUB_ALL);
    atomic_store(&shm->local_done, 40);
    struct pos_grant_view g = pos_shm_grant(shm);
    CU_ASSERT_EQUAL(g.mode, POS_GRANT_WINDOW);
    CU_ASSERT_EQUAL(g.granted, 0);
    CU_ASSERT_EQUAL(g.done, 0);
    CU_ASSERT_EQUAL(atomic_load(&shm->sample), 1);
    uint32_t word = atomic_load(&shm->grant_word);
    pos_publish(&p, decision(POS_GRANT_WINDOW, 30, 5, 8, 1), 1);
    pos_shm_publish(shm, &p, POS_PUB_GRANT);
    g = pos_shm_grant(shm);
    CU_ASSERT_EQUAL(g.granted, 30);
    CU_ASSERT_EQUAL(g.window, 5);
    CU_ASSERT_EQUAL(g.done, 40);
    CU_ASSERT_EQUAL(atomic_load(&shm->grant_word), word + 1); /* waiters look again */
    CU_ASSERT_EQUAL(atomic_load(&shm->sample), 1);            /* not said to change */
    pos_shm_publish(shm, &p, POS_PUB_SAMPLE | POS_PUB_KICK);
    CU_ASSERT_EQUAL(atomic_load(&shm->sample), 8);
    CU_ASSERT_EQUAL(atomic_load(&shm->kick_on_done), 1);
    CU_ASSERT_EQUAL(atomic_load(&shm->grant_word), word + 1);
    free(shm);
}

/* ---- the order posd reads a client in ------------------------------------------------------ */

/* A client's reports as a list of syncs (what each covers) and a log of what was read. */
struct fake_client {
    uint64_t covers[4];
    int nsyncs, next;
    uint64_t submitted;   /* submissions there are: 1..submitted */
    uint64_t read;        /* submissions read so far */
    uint64_t not_written; /* a sync covering beyond this waits (0: none) */
    int fail_at;          /* the call (1-based) that reports a broken protocol, 0: none */
    int calls;
    char log[256];
};

static int fake_fail(struct fake_client *f)
{
    return ++f->calls == f->fail_at;
}

static void fake_log(struct fake_client *f, const char *what, uint64_t n)
{
    size_t k = strlen(f->log);
    snprintf(f->log + k, sizeof f->log - k, "%s%s%llu", k ? " " : "", what, (unsigned long long)n);
}

static int fake_sync_next(void *src, uint64_t *covers)
{
    struct fake_client *f = src;
    if (fake_fail(f))
        return -1;
    if (f->next == f->nsyncs)
        return 0;
    *covers = f->covers[f->next];
    return 1;
}

static int fake_submissions(void *src, uint64_t upto)
{
    struct fake_client *f = src;
    if (fake_fail(f))
        return -1;
    uint64_t to = upto < f->submitted ? upto : f->submitted;
    if (to > f->read) {
        f->read = to;
        fake_log(f, "sub", to);
    }
    return 0;
}

static int fake_sync(void *src)
{
    struct fake_client *f = src;
    if (fake_fail(f))
        return -1;
    uint64_t c = f->covers[f->next];
    if (f->not_written && c > f->not_written)
        return 0;
    fake_log(f, "sync", c);
    f->next++;
    return 1;
}

static int fake_completions(void *src)
{
    struct fake_client *f = src;
    if (fake_fail(f))
        return -1;
    fake_log(f, "done", f->read);
    return 0;
}

static const struct pos_drain_ops fake_ops = {
    .sync_next = fake_sync_next,
    .submissions = fake_submissions,
    .sync = fake_sync,
    .completions = fake_completions,
};

/* Each synchronisation after the submissions it covers and before later ones, then the rest of
 * the submissions, then the completions: requests are told apart however late posd looks. */
static void test_posd_reads_each_sync_after_the_submissions_it_covers(void)
{
    struct fake_client f = {.covers = {3, 7}, .nsyncs = 2, .submitted = 10};
    CU_ASSERT_EQUAL(pos_drain(&fake_ops, &f), 0);
    CU_ASSERT_STRING_EQUAL(f.log, "sub3 sync3 sub7 sync7 sub10 done10");
}

/* A sync whose submissions are still being written waits, and so do the syncs after it; the
 * submissions there are are read all the same. */
static void test_a_sync_still_being_written_waits_for_the_next_look(void)
{
    struct fake_client f = {.covers = {3, 7, 9}, .nsyncs = 3, .submitted = 6, .not_written = 6};
    CU_ASSERT_EQUAL(pos_drain(&fake_ops, &f), 0);
    CU_ASSERT_STRING_EQUAL(f.log, "sub3 sync3 sub6 done6");
    CU_ASSERT_EQUAL(f.next, 1);
}

static void test_a_broken_protocol_stops_the_reading(void)
{
    for (int at = 1; at <= 6; at++) {
        struct fake_client f = {.covers = {3}, .nsyncs = 1, .submitted = 5, .fail_at = at};
        CU_ASSERT_EQUAL(pos_drain(&fake_ops, &f), -1);
        CU_ASSERT_EQUAL(f.calls, at); /* nothing is read after it */
    }
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("rules", NULL, NULL);
    POS_ADD_TEST(s, test_a_free_grant_lets_every_launch_go);
    POS_ADD_TEST(s, test_a_launch_within_the_grant_goes_and_the_next_waits);
    POS_ADD_TEST(s, test_a_launch_within_the_window_over_the_reported_prefix_goes);
    POS_ADD_TEST(s, test_the_last_launch_a_grant_allows_gets_a_marker);
    POS_ADD_TEST(s, test_a_wait_is_for_a_window_step_only_under_a_window_cap);
    POS_ADD_TEST(s, test_short_step_waits_help_and_long_ones_one_in_sixteen);
    POS_ADD_TEST(s, test_the_helped_wait_average_weighs_the_last_wait_one_eighth);
    POS_ADD_TEST(s, test_the_sample_followed_is_the_smaller_unless_one_is_zero);
    POS_ADD_TEST(s, test_a_marker_is_due_every_sample_launches);
    POS_ADD_TEST(s, test_a_lower_sample_takes_effect_at_once);
    POS_ADD_TEST(s, test_the_collector_is_prompt_while_posd_waits_on_completions);
    POS_ADD_TEST(s, test_the_collector_polls_with_work_and_backs_off_when_idle);
    POS_ADD_TEST(s, test_a_prompt_collector_polls_no_faster_than_its_pass_allows);
    POS_ADD_TEST(s, test_the_host_is_short_of_cores_while_tasks_wait_a_tenth_of_the_time);
    POS_ADD_TEST(s, test_the_cpu_stall_total_is_read_from_the_some_line);
    POS_ADD_TEST(s, test_a_marker_is_final_and_the_first_bound_stays);
    POS_ADD_TEST(s, test_a_record_waits_for_its_completion_and_its_own_marker);
    POS_ADD_TEST(s, test_a_sync_covering_every_launch_leaves_the_client_idle);
    POS_ADD_TEST(s, test_a_registered_client_waits_for_posd_with_a_marker_behind_every_launch);
    POS_ADD_TEST(s, test_posd_publishes_the_sample_and_kicks_always_and_the_grant_when_changed);
    POS_ADD_TEST(s, test_a_thread_reads_the_grant_posd_published);
    POS_ADD_TEST(s, test_posd_reads_each_sync_after_the_submissions_it_covers);
    POS_ADD_TEST(s, test_a_sync_still_being_written_waits_for_the_next_look);
    POS_ADD_TEST(s, test_a_broken_protocol_stops_the_reading);
}
