/* Tests the scheduling policies (sched/policy/) as pure functions of a view: fifo lets all go;
 * priority holds less important clients while a more important one has work (not a stalled
 * one, not a waiter count with nothing queued), lets them run in a capped window while more
 * important ones are idle, lets a client with nobody above it launch freely whatever its cap,
 * never takes a grant back, and grants a starving held client its guard share. */
#include <string.h>

#include "pos/client_shm.h"
#include "sched/policy/policy.h"
#include "tests/cunit_main.h"

static struct pos_sched_client cl[4];

static struct pos_sched_view view(size_t n, int64_t now)
{
    struct pos_sched_view v = {.now = now,
                               .period_start = 0,
                               .guard_period_ns = 200000000,
                               .credits = 1024,
                               .window_ns = 500000,
                               .clients = cl,
                               .nclients = n};
    return v;
}

/* A client with SUBMITTED operators of which the first RELEASED are released and the first
 * COMPLETED complete. */
static void client(int i, int prio, uint32_t max_inflight, uint64_t submitted, uint64_t released,
                   uint64_t completed, uint64_t granted)
{
    memset(&cl[i], 0, sizeof cl[i]);
    cl[i].id = (uint32_t)i + 1;
    cl[i].priority = prio;
    cl[i].max_inflight = max_inflight;
    cl[i].min_share = 0.02;
    cl[i].submitted = submitted;
    cl[i].released = cl[i].released_upto = released;
    cl[i].completed = cl[i].completed_upto = completed;
    cl[i].granted = granted;
}

static void set_released(int i, uint64_t n)
{
    cl[i].released = cl[i].released_upto = n;
}

static void set_completed(int i, uint64_t n)
{
    cl[i].completed = cl[i].completed_upto = n;
}

static int64_t decide(const struct pos_policy_ops *p, struct pos_sched_view *v)
{
    return p->decide(NULL, v);
}

static void test_registry(void)
{
    CU_ASSERT_PTR_NOT_NULL(pos_policy_find("fifo"));
    CU_ASSERT_PTR_NOT_NULL(pos_policy_find("priority"));
    CU_ASSERT_PTR_NOT_NULL(pos_policy_find("staged"));
    CU_ASSERT_PTR_NULL(pos_policy_find("edf"));
    int n = 0;
    for (int i = 0; pos_policies[i]; i++, n++)
        CU_ASSERT_PTR_NOT_NULL(pos_policies[i]->summary);
    CU_ASSERT_EQUAL(n, 3);
}

static void test_fifo_lets_everything_go(void)
{
    client(0, 0, 0, 10, 10, 5, 0);
    client(1, 20, 2, 100, 50, 40, 50);
    struct pos_sched_view v = view(2, 1000);
    decide(pos_policy_find("fifo"), &v);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(cl[i].mode, POS_GRANT_FREE);
        CU_ASSERT_EQUAL(cl[i].held, 0);
        CU_ASSERT(cl[i].new_granted >= cl[i].submitted);
    }
}

static void test_priority_holds_lower_class_while_higher_busy(void)
{
    const struct pos_policy_ops *p = pos_policy_find("priority");
    /* latency client with work in flight; a batch client with work queued */
    client(0, 10, 0, 50, 50, 40, 50);
    client(1, 20, 2, 30, 20, 20, 20);
    struct pos_sched_view v = view(2, 1000000);
    cl[1].served_ns = 1000000; /* not starving */
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[0].mode, POS_GRANT_FREE);
    CU_ASSERT_EQUAL(cl[0].held, 0);
    CU_ASSERT_EQUAL(cl[1].mode, POS_GRANT_WINDOW);
    CU_ASSERT_EQUAL(cl[1].held, 1);
    CU_ASSERT_EQUAL(cl[1].new_granted, 20);
    /* the latency client goes idle (all complete, nothing queued): batch runs, capped */
    set_completed(0, 50);
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 0);
    CU_ASSERT_EQUAL(cl[1].mode, POS_GRANT_WINDOW);
    CU_ASSERT_EQUAL(cl[1].new_granted, 22); /* completed 20 + max_inflight 2 */
    /* the latency client launches again: batch is held, its grant not taken back */
    cl[0].submitted = 51;
    set_released(0, 51);
    cl[1].granted = 22;
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 1);
    CU_ASSERT_EQUAL(cl[1].new_granted, 22);
}

static void test_priority_alone_runs_free_whatever_its_cap(void)
{
    const struct pos_policy_ops *p = pos_policy_find("priority");
    client(0, 20, 2, 300, 120, 100, 120);
    struct pos_sched_view v = view(1, 1000);
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[0].mode, POS_GRANT_FREE);
    CU_ASSERT_EQUAL(cl[0].held, 0);
    CU_ASSERT(cl[0].new_granted >= 300);
}

static void test_priority_stalled_or_idle_higher_class_holds_nobody(void)
{
    const struct pos_policy_ops *p = pos_policy_find("priority");
    /* the latency client has work in flight but has not completed anything for a while */
    client(0, 10, 0, 50, 50, 40, 50);
    cl[0].stalled = 1;
    client(1, 20, 2, 30, 20, 20, 20);
    struct pos_sched_view v = view(2, 1000000);
    cl[1].served_ns = 1000000;
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 0);
    CU_ASSERT_EQUAL(cl[1].new_granted, 22);
    /* a waiter count the latency client writes with nothing queued is not work */
    client(0, 10, 0, 50, 50, 50, 50);
    cl[0].waiting = 5;
    cl[1].granted = 22;
    set_completed(1, 22);
    set_released(1, 22);
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 0);
    CU_ASSERT_EQUAL(cl[1].new_granted, 24);
}

static void test_priority_other_devices_do_not_hold(void)
{
    const struct pos_policy_ops *p = pos_policy_find("priority");
    client(0, 0, 0, 50, 50, 10, 50);
    client(1, 20, 4, 30, 20, 20, 20);
    cl[1].device = 1;
    struct pos_sched_view v = view(2, 1000);
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 0);
    /* it is the most important client of its device: free, its cap does not apply */
    CU_ASSERT_EQUAL(cl[1].mode, POS_GRANT_FREE);
    CU_ASSERT(cl[1].new_granted >= 30);
}

static void test_priority_starvation_guard(void)
{
    const struct pos_policy_ops *p = pos_policy_find("priority");
    client(0, 0, 0, 500, 500, 100, 500);
    client(1, 20, 3, 40, 10, 10, 10);
    cl[1].min_share = 0.05;
    /* early in the 200 ms period, unserved: not yet starving, held */
    cl[1].served_ns = 1000000;
    struct pos_sched_view v = view(2, 100000000);
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 1);
    CU_ASSERT_EQUAL(cl[1].new_granted, 10);
    /* in the last 5% of the period, served 1 ms < 10 ms: it gets a step */
    v.now = 191000000;
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 0);
    CU_ASSERT_EQUAL(cl[1].new_granted, 13);
    /* once served its share (10 ms of 200) it is held again */
    cl[1].served_ns = 11000000;
    cl[1].granted = 13;
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].held, 1);
    CU_ASSERT_EQUAL(cl[1].new_granted, 13);
    /* nothing queued: no guard grant even if unserved */
    cl[1].served_ns = 0;
    cl[1].submitted = 13;
    set_released(1, 13);
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].new_granted, 13);
}

static void test_priority_three_classes(void)
{
    const struct pos_policy_ops *p = pos_policy_find("priority");
    client(0, 0, 0, 5, 5, 5, 5);      /* realtime, idle */
    client(1, 10, 0, 60, 60, 50, 60); /* latency, busy */
    client(2, 20, 2, 30, 20, 20, 20); /* batch, queued */
    for (int i = 0; i < 3; i++)
        cl[i].served_ns = 1000000000;
    struct pos_sched_view v = view(3, 1000000);
    decide(p, &v);
    /* realtime is present but idle, so latency launches in a window, not freely: about
     * window_us of work, two operators while nothing is known of their durations; it has
     * ten in flight already, so nothing more yet */
    CU_ASSERT_EQUAL(cl[1].mode, POS_GRANT_WINDOW);
    CU_ASSERT_EQUAL(cl[1].held, 0);
    CU_ASSERT_EQUAL(cl[1].new_granted, 60);
    /* once its operators are known to take 50 us, a 500 us window is ten of them */
    cl[1].op_ns = 50000;
    set_completed(1, 55);
    decide(p, &v);
    CU_ASSERT_EQUAL(cl[1].new_granted, 65);
    CU_ASSERT_EQUAL(cl[2].held, 1);
    CU_ASSERT_EQUAL(cl[0].mode, POS_GRANT_FREE);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("policy", NULL, NULL);
    POS_ADD_TEST(s, test_registry);
    POS_ADD_TEST(s, test_fifo_lets_everything_go);
    POS_ADD_TEST(s, test_priority_holds_lower_class_while_higher_busy);
    POS_ADD_TEST(s, test_priority_other_devices_do_not_hold);
    POS_ADD_TEST(s, test_priority_alone_runs_free_whatever_its_cap);
    POS_ADD_TEST(s, test_priority_stalled_or_idle_higher_class_holds_nobody);
    POS_ADD_TEST(s, test_priority_starvation_guard);
    POS_ADD_TEST(s, test_priority_three_classes);
}
