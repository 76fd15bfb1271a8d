/* Stream capture and graphs: operations issued into a capturing stream become nodes of a
 * graph (streams that wait on an event recorded in the capture join it as branches); an
 * instantiated graph is replayed onto the device by cuGraphLaunch, branch by branch, with
 * graph-node launch latency, and the stream waits for all of it. */
#include "sim/driver/drv.h"

#include <stdlib.h>
#include <string.h>

struct drv_exec {
    CUgraphExec handle;
    struct drv_ctx *ctx;
    size_t n;
    struct drv_node *nodes;
    int nbranches;
    struct drv_stream **branch_streams; /* [nbranches]; [0] unused: the launch stream */
    int *node_op;                       /* scratch: model op of each node in a launch */
    uint32_t *node_gen;
};

static _Atomic uint64_t next_capture_id = 1;

/* The most streams a replayed graph forks into (its launch stream and the branches) */
#define GRAPH_MAX_BRANCHES 64

int drv_capture_node(struct drv_stream *s, struct drv_op_desc *d, CUresult *rc)
{
    struct drv_graph *g = s->capture;
    if (!g)
        return 0;
    if (s->capture_invalid) {
        *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        return 1;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 32;
        struct drv_node *nn = realloc(g->nodes, cap * sizeof *nn);
        if (!nn) {
            *rc = CUDA_ERROR_OUT_OF_MEMORY;
            return 1;
        }
        g->nodes = nn;
        g->cap = cap;
    }
    struct drv_node *node = &g->nodes[g->n];
    memset(node, 0, sizeof *node);
    node->d = *d;
    node->d.ndeps = 0;
    node->branch = s->capture_branch;
    if (s->capture_last >= 0)
        node->deps[node->ndeps++] = s->capture_last;
    for (int i = 0; i < d->ndeps && node->ndeps < SIM_MAX_DEPS; i++)
        if (d->deps[i] >= 0 && d->deps[i] != s->capture_last)
            node->deps[node->ndeps++] = d->deps[i];
    s->capture_last = (int)g->n;
    g->n++;
    *rc = CUDA_SUCCESS;
    return 1;
}

static void graph_free(struct drv_graph *g)
{
    free(g->nodes);
    free(g);
}

/* ---- capture ----------------------------------------------------------------------------- */

static CUresult begin_capture(int ptsz, CUstream h, CUstreamCaptureMode mode)
{
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(1, h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (s->kind == STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    struct drv_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->ctx = s->ctx;
    g->nbranches = 1;
    g->capture_id = atomic_fetch_add(&next_capture_id, 1);
    s->capture = g;
    s->capture_mode = mode;
    s->capture_invalid = 0;
    s->capture_last = -1;
    s->capture_branch = 0;
    s->capture_id = g->capture_id;
    return CUDA_SUCCESS;
}

API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
    return begin_capture(0, h, mode);
}
API CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode)
{
    return begin_capture(1, h, mode);
}
API CUresult cuStreamBeginCapture(CUstream h)
{
    return begin_capture(0, h, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
API CUresult cuStreamBeginCapture_ptsz(CUstream h)
{
    return begin_capture(1, h, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* Takes every stream out of capture G; returns whether any of them saw an invalidation. */
static int end_capture_all(struct drv_ctx *c, struct drv_graph *g)
{
    int invalid = 0;
    pthread_mutex_lock(&drv.lock);
    for (struct drv_stream *s = c->streams; s; s = s->next_in_ctx) {
        if (s->capture != g)
            continue;
        invalid |= s->capture_invalid;
        s->capture = NULL;
        s->capture_invalid = 0;
        s->capture_last = -1;
    }
    pthread_mutex_unlock(&drv.lock);
    return invalid;
}

static CUresult end_capture(int ptsz, CUstream h, CUgraph *phGraph)
{
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(phGraph != NULL, h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_graph *g = s->capture;
    if (!g || s->capture_branch != 0)
        return CUDA_ERROR_ILLEGAL_STATE;
    *phGraph = NULL;
    if (end_capture_all(s->ctx, g)) {
        graph_free(g);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    g->handle = drv_handle_new(H_GRAPH, g);
    if (!g->handle) {
        graph_free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phGraph = g->handle;
    return CUDA_SUCCESS;
}

API CUresult cuStreamEndCapture(CUstream h, CUgraph *phGraph)
{
    return end_capture(0, h, phGraph);
}
API CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *phGraph)
{
    return end_capture(1, h, phGraph);
}

static CUresult capture_status(int ptsz, CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(st != NULL, h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    *st = !s->capture          ? CU_STREAM_CAPTURE_STATUS_NONE
          : s->capture_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                               : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id)
        *id = s->capture ? s->capture_id : 0;
    return CUDA_SUCCESS;
}

API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st)
{
    return capture_status(0, h, st, NULL);
}
API CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *st)
{
    return capture_status(1, h, st, NULL);
}
API CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_status(0, h, st, id);
}
API CUresult cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_status(1, h, st, id);
}

/* The _v2/_v3 forms also return the graph; node handles are not exposed (no dependencies). */
static CUresult capture_info_v3(int ptsz, CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                CUgraph *graph, const CUgraphNode **deps,
                                const CUgraphEdgeData **edges, size_t *ndeps)
{
    CUresult rc = capture_status(ptsz, h, st, id);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_stream *s;
    drv_enter_stream(1, h, ptsz, &s);
    if (graph)
        *graph = NULL; /* the graph gets a handle when the capture ends */
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                       CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info_v3(0, h, st, id, graph, deps, NULL, ndeps);
}
API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                            CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info_v3(1, h, st, id, graph, deps, NULL, ndeps);
}
API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                       CUgraph *graph, const CUgraphNode **deps,
                                       const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info_v3(0, h, st, id, graph, deps, edges, ndeps);
}
API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                            CUgraph *graph, const CUgraphNode **deps,
                                            const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info_v3(1, h, st, id, graph, deps, edges, ndeps);
}

/* ---- graphs and executable graphs --------------------------------------------------------- */

API CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUresult rc;
    struct drv_graph *g = drv_enter_destroy(H_GRAPH, hGraph, &rc);
    if (!g)
        return rc;
    graph_free(g);
    return CUDA_SUCCESS;
}

static void exec_free(struct drv_exec *x)
{
    free(x->nodes);
    free(x->branch_streams);
    free(x->node_op);
    free(x->node_gen);
    free(x);
}

API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                         unsigned long long flags)
{
    (void)flags; /* auto-free-on-launch, upload, device launch, priority: no effect here */
    CUresult rc;
    struct drv_graph *g = drv_enter_handle(phGraphExec != NULL, H_GRAPH, hGraph, &rc);
    if (!g)
        return rc;
    struct drv_exec *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->ctx = g->ctx;
    x->n = g->n;
    x->nbranches = g->nbranches;
    x->nodes = malloc((g->n ? g->n : 1) * sizeof *x->nodes);
    x->node_op = malloc((g->n ? g->n : 1) * sizeof *x->node_op);
    x->node_gen = malloc((g->n ? g->n : 1) * sizeof *x->node_gen);
    /* an array of stream pointers: the element is meant to be a pointer */
    x->branch_streams = calloc((size_t)g->nbranches,
                               sizeof *x->branch_streams); // NOLINT(bugprone-sizeof-expression)
    if (!x->nodes || !x->node_op || !x->node_gen || !x->branch_streams ||
        !(x->handle = drv_handle_new(H_EXEC, x))) {
        exec_free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(x->nodes, g->nodes, g->n * sizeof *x->nodes);
    *phGraphExec = x->handle;
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                   CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = '\0';
    return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult rc;
    struct drv_exec *x = drv_enter_destroy(H_EXEC, hGraphExec, &rc);
    if (!x)
        return rc;
    pthread_mutex_lock(&drv.lock);
    for (int b = 1; b < x->nbranches; b++) {
        struct drv_stream *s = x->branch_streams[b];
        if (!s || x->ctx->destroyed)
            continue;
        s->destroyed = 1;
        if (atomic_load(&s->completed) >= s->submitted)
            drv_stream_release(s);
    }
    pthread_mutex_unlock(&drv.lock);
    exec_free(x);
    return CUDA_SUCCESS;
}

/* Submits the nodes of X onto S. Nodes come in capture order, which is topological. */
static CUresult replay(struct drv_exec *x, struct drv_stream *s)
{
    int start_op = s->last_op;
    uint32_t start_gen = s->last_gen;
    /* every entry, not only the first nbranches: a node's branch is below nbranches (capture
     * numbers them so) but the analyzer cannot see it, and -1 is "none yet" for any */
    int branch_last[GRAPH_MAX_BRANCHES];
    for (int b = 0; b < GRAPH_MAX_BRANCHES; b++)
        branch_last[b] = -1;
    for (size_t i = 0; i < x->n; i++) {
        struct drv_node *node = &x->nodes[i];
        struct drv_op_desc d = node->d;
        struct drv_stream *target = node->branch == 0 ? s : x->branch_streams[node->branch];
        d.flags |= SIM_OPF_GRAPH_NODE;
        d.ndeps = 0;
        for (int k = 0; k < node->ndeps; k++) {
            int dep = node->deps[k];
            if (x->nodes[dep].branch == node->branch && dep == branch_last[node->branch])
                continue; /* stream order covers it */
            d.deps[d.ndeps] = x->node_op[dep];
            d.dep_gens[d.ndeps] = x->node_gen[dep];
            d.ndeps++;
        }
        if (node->branch != 0 && node->ndeps == 0 && start_op != SIM_NONE &&
            d.ndeps < SIM_MAX_DEPS) {
            d.deps[d.ndeps] = start_op; /* the graph starts after earlier work on S */
            d.dep_gens[d.ndeps] = start_gen;
            d.ndeps++;
        }
        if (d.effect == EFF_EVENT) {
            struct drv_event *e = d.u.event.ev;
            pthread_mutex_lock(&drv.lock);
            d.u.event.record = ++e->records;
            pthread_mutex_unlock(&drv.lock);
        }
        struct drv_ticket t;
        CUresult rc = drv_submit(target, &d, &t);
        if (rc != CUDA_SUCCESS)
            return rc;
        if (d.effect == EFF_EVENT) {
            d.u.event.ev->op = t.op;
            d.u.event.ev->gen = t.gen;
            d.u.event.ev->ctx = target->ctx;
        }
        x->node_op[i] = t.op;
        x->node_gen[i] = t.gen;
        if (node->branch < GRAPH_MAX_BRANCHES)
            branch_last[node->branch] = (int)i;
    }
    /* S continues only after every branch has finished. */
    struct drv_op_desc join;
    memset(&join, 0, sizeof join);
    join.kind = SIM_OP_MARKER;
    for (int b = 1; b < x->nbranches && b < GRAPH_MAX_BRANCHES; b++) {
        if (branch_last[b] < 0)
            continue;
        if (join.ndeps == SIM_MAX_DEPS) {
            CUresult rc = drv_submit(s, &join, NULL);
            if (rc != CUDA_SUCCESS)
                return rc;
            join.ndeps = 0;
        }
        join.deps[join.ndeps] = x->node_op[branch_last[b]];
        join.dep_gens[join.ndeps] = x->node_gen[branch_last[b]];
        join.ndeps++;
    }
    return join.ndeps ? drv_submit(s, &join, NULL) : CUDA_SUCCESS;
}

static CUresult graph_launch(int ptsz, CUgraphExec hGraphExec, CUstream h)
{
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(1, h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_exec *x = drv_handle_get(H_EXEC, hGraphExec);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* child graphs are not simulated */
    if (x->ctx != s->ctx || x->ctx->destroyed)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (x->nbranches > GRAPH_MAX_BRANCHES)
        return CUDA_ERROR_NOT_SUPPORTED;
    for (int b = 1; b < x->nbranches; b++) {
        if (x->branch_streams[b])
            continue;
        rc = drv_stream_create(x->ctx, STREAM_HIDDEN, CU_STREAM_NON_BLOCKING, s->prio,
                               &x->branch_streams[b]);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return replay(x, s);
}

API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(0, hGraphExec, hStream);
}

API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(1, hGraphExec, hStream);
}
