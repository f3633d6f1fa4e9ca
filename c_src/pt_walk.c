/* pt_walk.c - one thread's calls, streamed from its events without a slice table.
 *
 * The walk does in one pass, incrementally, what replay (the tests' oracle) and the
 * slice post-processing (regions, min_duration, tagged names, carriers) do to a
 * whole slice table, and emits the calls the trace shows as begin/end records in
 * time order. It holds the open calls and the records not yet decided, so its
 * memory follows the call depth (and, under min_duration, the calls of the last
 * min_duration), not the trace's length. Events are fed a run at a time, from
 * the chunks in memory or from a spill file's blocks.
 *
 * Some facts are known only after a call began: an optimizer step names its
 * parent, a record_function's args name the region, a call still open at stop is
 * marked so at its begin. A first walk (the scan, no output) finds them; the
 * emitting walk, fed the same events, looks them up by the call's ordinal (the
 * calls and regions in the order they begin, the same in both walks).
 *
 * A stream (pt_walk_new_stream) emits without a scan, for an encoder that writes
 * while the trace records: a call open at stop says so at its end, as the
 * emitting walk says it too; a tag or args, which only the scan decides, make it
 * stale.
 *
 * A call's begin is emitted at the next call after it or at its return, not at
 * once: the watcher's tag and a region's args follow the call's own event, and
 * they decide its name and whether a torch region opens around it. (A tag after
 * a callee began, which the recorder never writes, names nothing here.)
 *
 * min_duration: a call that ends shorter than it has only shorter callees, and
 * everything emitted since its begin is its subtree, so dropping it truncates the
 * pending records back to its begin. Records before the outermost open call that
 * may still turn out short are final.
 *
 * The slice table (Trace.thread_slices) is the same slices whole: an emitting
 * walk in table mode writes each shown call into the caller's array at its
 * begin and sets its end when it ends; min_duration cuts the array back as it
 * cuts the records. Replay (tests/c_oracle/pt_replay.c) builds the same table
 * its own way: the tests' independent reference, not part of the package.
 *
 * Chrome JSON wants each call whole and in start order, with the slice table's
 * numbering. For it a second scan keeps every call's duration (4 bytes a call),
 * and the emitting walk then writes each shown call as a pt_slice at its begin,
 * leaving out at once the calls min_duration drops.
 *
 * The plain scan: a scan of a trace without tags, args or min_duration (what a
 * stopped session without the torch watcher holds) needs only the counts, the
 * ordinals of the calls open at stop and, for JSON, each call's duration, none of
 * the full walk's nodes, regions or records. Its findings are the full scan's,
 * field for field.
 *
 * One pairing engine serves both. pt_walk_run reads the events and keeps the
 * clock; calls and returns pair on one stack of pairing words (pt_walk_cursor):
 * pt_walk_open pushes, pt_walk_close pops, and which calls a return closes is one
 * rule, pt_walk_closes (pt_walk_return; its commonest case, the top call, tested
 * inline by pt_walk_closes_top). What a walk keeps per call is what the engine
 * calls as a call opens and closes: the full walk's calls, nodes, regions and records
 * (pt_walk_call_opened, pt_walk_call_closed), the plain scan's counts and
 * durations (pt_walk_plain_opened, pt_walk_plain_closed). The walk's mode is a
 * compile-time constant: the engine is made three times (the full walk, the
 * plain scan, the plain scan keeping durations), each copy holding its own work
 * alone and no test of the mode, as a plain scan costs only ~16 instructions an
 * event (benchmarks/scan.py --callgrind).
 *
 * Most events are a call or the return of the top call. The engine takes those
 * two inline, a block of events at a time with room for the block's pushes made
 * before it; anything else (a seed, an aux event, a return that closes several
 * calls or none) ends the block and goes through pt_walk_event, which takes any
 * event. The plain scan goes further: its cursor is a copy in registers, written
 * back when the block ends, and a call that is not plain (a hidden key, a
 * carrier, inside a hidden subtree) or the return of one (its word marked,
 * PT_PLAIN_SPECIAL) ends the block too, so that inline its push and pop are a
 * few stores.
 */
#include "pt_export_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t start;
    uint64_t ordinal;       /* begin order among this walk's calls and regions */
    uint64_t mark;          /* records written before its begin (absolute count) */
    uint64_t kept_before;   /* the stats before it began: restored when it is dropped */
    uint64_t open_before;
    uint32_t depth_before;
    uint32_t open_at_start_before;
    uint32_t key;
    uint32_t tag;
    uint32_t depth;         /* shown calls and regions open below it */
    uint32_t sub_max;       /* deepest kept shown node ended in its subtree, + 1 (0: none) */
    uint8_t is_region;
    uint8_t shown;          /* not a carrier: its records are written */
    uint8_t exempt;         /* never a carrier (a region, a region with args) */
    uint8_t open_at_stop;   /* emitting walk: the scan saw it open at stop */
    uint8_t slice_flags;    /* PT_SLICE_C, PT_SLICE_SEEDED */
    int64_t child_parent;   /* slices mode: the slice index its callees' parent is (-1) */
    uint32_t child_depth;   /* slices mode: their depth */
} pt_walk_node;

/* The full walk's open call */
typedef struct {
    int64_t start;
    int64_t node;           /* index in nodes, -1 when not emitted */
    uint32_t key;
    uint32_t tag;
    uint8_t is_c;
    uint8_t open_at_start;  /* seeded when the trace began: PT_SLICE_SEEDED */
    uint8_t hides_subtree;
    uint8_t emits;          /* replay would emit it (a slice exists) */
    uint8_t pending;        /* emits, and its node is not made yet */
} pt_walk_call;

typedef struct {
    uint64_t ordinal;
    uint64_t order;         /* the rename's own order: the last one for a call wins */
    uint32_t key;
} pt_walk_rename;

typedef struct {
    uint64_t ordinal;
    int64_t duration;       /* ns, at least UINT32_MAX */
} pt_walk_long;

/* The engine's modes (constants: pt_walk_run is made once for each) */
#define PT_WALK_FULL 0
#define PT_WALK_PLAIN 1
#define PT_WALK_PLAIN_DURATIONS 2   /* the plain scan keeping each call's duration */

/* Where the engine is in a thread's events: the clock, and the open calls, each
 * one's pairing word (pt_walk_call_word) and beside it what the walk keeps per
 * call. The walk's own is w->at; the plain scan's inline loop moves a copy in
 * registers and writes it back when it leaves. */
typedef struct {
    int64_t ticks;          /* the clock: the ticks of the latest event */
    uint64_t n;             /* open calls */
    uint64_t ordinals;      /* calls and regions begun: the next one's ordinal */
    uint32_t *words;        /* per open call, its pairing word, innermost last; words[-1]
                             * is PT_WALK_BOTTOM */
    pt_walk_call *calls;    /* the full walk: per open call */
    uint64_t *ords;         /* the plain scan: per open call, its node's ordinal */
    int64_t *starts;        /* ... and its begin (ns), when keeping durations */
    uint64_t deepest;       /* the plain scan's inline loop: the most calls under a push */
} pt_walk_cursor;

/* The slot below the stack: bit 0 set, so no return's call word (bit 0 clear)
 * equals it and the inline test of the top call needs no test of the depth. */
#define PT_WALK_BOTTOM 1u

/* The plain scan marks a call that is not a plain shown call with bit 0 of its
 * pairing word (pt_walk_closes ignores it; its flags say what it is), so that its
 * return leaves the inline loop as other returns not of the top call do. */
#define PT_PLAIN_SPECIAL 1u
#define PT_PLAIN_EMITS 1        /* flags: a node (an ordinal) */
#define PT_PLAIN_SHOWN 2        /* ... that the trace shows */
#define PT_PLAIN_HIDES 4        /* hides its subtree */
typedef struct {
    uint8_t *flags;         /* per open call, when marked */
    uint8_t *shows;         /* per key below n_shows, then 1 for the keys above: a
                             * call of it (not a seed) is plain */
    uint8_t *hidden_now;    /* as shows, all 0: inside a hidden subtree */
    uint32_t n_shows;
    uint64_t unshown_open;  /* open calls that are not shown */
    uint64_t unshown;       /* nodes begun that are not shown (carriers) */
    int64_t now_ticks;      /* ticks of the latest call or return */
} pt_walk_plain;

struct pt_walk {
    pt_walk_tables t;
    const pt_walk *scan;    /* NULL: this is the scan, or a stream */
    int stream;             /* emitting without a scan (pt_walk_new_stream) */
    int stale;              /* a stream met what only a scan decides (tags, args) */
    pt_walk_cursor at;
    uint32_t *slots;        /* PT_WALK_BOTTOM, then at.words */
    uint64_t cap_calls;     /* room in at.words and in the arrays beside it */
    uint64_t hiding;        /* open calls hiding their subtree */
    int64_t now;            /* ns of the latest call or return */
    int64_t max_end;        /* latest end of any emitted call: where root regions close */
    int finished;
    int has_end;
    int has_now;
    pt_walk_node *nodes;
    uint64_t n_nodes, cap_nodes;
    uint32_t shown_open;    /* shown nodes on the stack */
    pt_walk_stats stats;
    /* emitting walk: records[0..n_records) are records base .. base + n_records */
    pt_walk_record *records;
    uint64_t n_records, cap_records, base;
    uint64_t next_rename, next_open;
    /* slices mode (the scan kept durations): finished slices in start order */
    pt_slice *slices;
    uint64_t n_slices, cap_slices, slices_base;
    /* table mode (pt_walk_fill_table): every slice of the thread, in the caller's array */
    pt_slice *table;
    uint64_t n_table, cap_table;
    /* scan results */
    pt_walk_rename *renames;
    uint64_t n_renames, cap_renames;
    uint64_t *open_ordinals;    /* the shown calls open at stop, in begin order */
    uint64_t n_open_ordinals;
    uint32_t *args_base_key;    /* per args index: the key it was recorded on */
    /* pt_walk_keep_durations: per ordinal, ns from begin to end (UINT32_MAX: see
     * long_durations); 4 bytes a call, as most calls are shorter than 4.3 s */
    uint32_t *durations;
    uint64_t n_durations, cap_durations;
    pt_walk_long *long_durations;       /* the longer ones, by ordinal once sorted */
    uint64_t n_long, cap_long;
    int keep_durations;
    /* the plain scan (plain != 0) */
    int plain;
    pt_walk_plain ps;
};

static int pt_walk_plain_begin(pt_walk *w);

static int
pt_walk_compare_long(const void *a, const void *b)
{
    const pt_walk_long *x = a, *y = b;
    return x->ordinal < y->ordinal ? -1 : x->ordinal > y->ordinal;
}

static int
pt_walk_compare_renames(const void *a, const void *b)
{
    const pt_walk_rename *x = a, *y = b;
    if (x->ordinal != y->ordinal)
        return x->ordinal < y->ordinal ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Returns a new walk, or NULL when out of memory. */
pt_walk *
pt_walk_new(const pt_walk_tables *tables, const pt_walk *scan, int64_t base_ticks)
{
    if (scan && !scan->finished)
        return NULL;            /* its findings are complete only once finished */
    pt_walk *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->t = *tables;
    w->scan = scan;
    w->at.ticks = base_ticks;
    if (!scan && pt_walk_plain_begin(w) != PT_OK) {
        pt_walk_free(w);
        return NULL;
    }
    if (!scan) {
        if (tables->n_args) {
            w->args_base_key = malloc(tables->n_args * sizeof *w->args_base_key);
            if (!w->args_base_key) {
                free(w);
                return NULL;
            }
            memset(w->args_base_key, 0xFF, tables->n_args * sizeof *w->args_base_key);
        }
    }
    return w;
}

/* A stream: an emitting walk without a scan, for an encoder that writes while
 * the trace records (its events come as they are spilled, and nothing after them
 * is known yet). What only the scan knows is not there: a call open at stop
 * says so at its end (PT_RECORD_OPEN_AT_STOP on the end record, as the emitting
 * walk says it too), and a tag or args event (a torch name or region, known only
 * once a later event came) makes it stale (pt_walk_stale): its records are then
 * not the trace's, and the caller walks the whole trace again instead. */
pt_walk *
pt_walk_new_stream(const pt_walk_tables *tables, int64_t base_ticks)
{
    pt_walk *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->t = *tables;
    w->stream = 1;
    w->at.ticks = base_ticks;
    return w;
}

/* A stream's hidden table grows as new keys are named (n_hidden entries): the
 * walk reads it from now on. */
void
pt_walk_stream_keys(pt_walk *w, const uint8_t *hidden, uint32_t n_hidden)
{
    w->t.hidden = hidden;
    w->t.n_hidden = n_hidden;
}

/* A stream learns at the end when the trace stopped (its open calls end then). */
void
pt_walk_stream_stop(pt_walk *w, int64_t stop_ticks)
{
    w->t.stop_ticks = stop_ticks;
}

int
pt_walk_stale(const pt_walk *w)
{
    return w->stale;
}

void
pt_walk_free(pt_walk *w)
{
    if (!w)
        return;
    free(w->slots);
    free(w->at.calls);
    free(w->at.ords);
    free(w->at.starts);
    free(w->nodes);
    free(w->records);
    free(w->renames);
    free(w->open_ordinals);
    free(w->args_base_key);
    free(w->slices);
    free(w->durations);
    free(w->long_durations);
    free(w->ps.flags);
    free(w->ps.shows);
    free(w);
}

/* The same arithmetic as replay's */
static inline int64_t
pt_walk_ns_of(int64_t ticks, int64_t tick0, int64_t ns0, double ns_per_tick)
{
    return ns0 + (int64_t)((double)(ticks - tick0) * ns_per_tick);
}

static inline int64_t
pt_walk_ns(const pt_walk *w, int64_t ticks)
{
    return pt_walk_ns_of(ticks, w->t.tick0, w->t.ns0, w->t.ns_per_tick);
}

static int
pt_walk_write(pt_walk *w, int64_t ts, uint32_t key, uint32_t flags)
{
    if (w->n_records == w->cap_records &&
        pt_grow((void **)&w->records, &w->cap_records, w->n_records + 1,
                     sizeof *w->records) != PT_OK)
        return PT_ERR_NOMEM;
    pt_walk_record *r = &w->records[w->n_records++];
    r->ts = ts;
    r->key = key;
    r->flags = flags;
    return PT_OK;
}

static inline int
pt_walk_is_carrier(const pt_walk *w, uint32_t key)
{
    return key < w->t.n_hidden && w->t.hidden[key] == PT_HIDE_CARRIER;
}

/* How a call of key hides (the one reading of the hidden table, for the full walk
 * and the plain scan): 1 when it is left out alone, and in *subtree whether what
 * it calls is left out with it. Launcher keys (PT_HIDE_SEEDED, PT_HIDE_STARTUP)
 * hide only where seeded; a carrier is shown until its region replaces it. */
static inline int
pt_walk_hides(const pt_walk *w, uint32_t key, int seeded, int *subtree)
{
    uint8_t hide = key < w->t.n_hidden ? w->t.hidden[key] : 0;
    if (((hide == PT_HIDE_SEEDED || hide == PT_HIDE_STARTUP) && !seeded) ||
        hide == PT_HIDE_CARRIER)
        hide = 0;
    *subtree = (hide == PT_HIDE_SUBTREE && !seeded) || hide == PT_HIDE_STARTUP;
    return hide != 0;
}

/* A call's duration, kept by ordinal: 4 bytes, or UINT32_MAX and the whole of it
 * in long_durations. */
static int
pt_walk_keep_duration(pt_walk *w, uint64_t ordinal, int64_t d)
{
    if (d >= UINT32_MAX) {
        if (pt_grow((void **)&w->long_durations, &w->cap_long, w->n_long + 1,
                         sizeof *w->long_durations))
            return PT_ERR_NOMEM;
        w->long_durations[w->n_long].ordinal = ordinal;
        w->long_durations[w->n_long++].duration = d;
        d = UINT32_MAX;
    }
    w->durations[ordinal] = (uint32_t)d;
    return PT_OK;
}

/* The scan's duration of the node with this ordinal. */
static int64_t
pt_walk_duration(const pt_walk *scan, uint64_t ordinal)
{
    if (ordinal >= scan->n_durations)
        return 0;
    uint32_t d = scan->durations[ordinal];
    if (d != UINT32_MAX)
        return d;
    uint64_t lo = 0, hi = scan->n_long;     /* sorted by ordinal at pt_walk_new */
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (scan->long_durations[mid].ordinal < ordinal)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < scan->n_long && scan->long_durations[lo].ordinal == ordinal
        ? scan->long_durations[lo].duration : 0;
}

/* A node's slice as the slice table holds it (saved directories write it as is),
 * numbered under its parent node's child_parent. */
static void
pt_walk_slice_at_begin(pt_slice *s, const pt_walk_node *n, int64_t end)
{
    s->start = n->start;
    s->end = end;
    s->key = n->key;
    s->flags = (n->is_region ? 0 : (uint32_t)(n->slice_flags | (n->open_at_stop
                                                                ? PT_SLICE_OPEN_AT_STOP : 0)));
    s->parent = n->child_parent;
    s->tag = n->is_region ? 0 : n->tag;
    s->depth = n->child_depth;
}

/* Slices mode: a node's slice, written at its begin (its end is the scan's), in
 * start order, numbered as the slice table numbers it; calls that min_duration
 * drops, and everything under them, are not written. */
static int
pt_walk_begin_slice(pt_walk *w, pt_walk_node *n)
{
    int64_t duration = pt_walk_duration(w->scan, n->ordinal);
    if (n->child_parent == -2 || (w->t.min_ns && duration < w->t.min_ns)) {
        n->child_parent = -2;           /* dropped, with its subtree */
        return PT_OK;
    }
    if (!n->shown)
        return PT_OK;                   /* a carrier: its callees are its parent's */
    if (w->n_slices == w->cap_slices &&
        pt_grow((void **)&w->slices, &w->cap_slices, w->n_slices + 1, sizeof *w->slices))
        return PT_ERR_NOMEM;
    pt_walk_slice_at_begin(&w->slices[w->n_slices], n, n->start + duration);
    n->child_parent = (int64_t)(w->slices_base + w->n_slices++);
    n->child_depth++;
    return PT_OK;
}

/* Table mode: a node's slice, written into the table at its begin (its end set
 * by pt_walk_end_node); mark: where min_duration cuts the table back to. */
static int
pt_walk_begin_table_slice(pt_walk *w, pt_walk_node *n)
{
    n->mark = w->n_table;
    if (!n->shown)
        return PT_OK;                   /* a carrier: its callees are its parent's */
    if (w->n_table == w->cap_table)
        return PT_ERR_ARG;              /* the caller's table is short */
    pt_walk_slice_at_begin(&w->table[w->n_table], n, n->start);
    n->child_parent = (int64_t)w->n_table++;
    n->child_depth++;
    return PT_OK;
}

static int
pt_walk_push_node(pt_walk *w, int64_t start, uint32_t key, uint32_t tag, int is_region,
                  int carrier_exempt, uint8_t slice_flags)
{
    if (pt_grow((void **)&w->nodes, &w->cap_nodes, w->n_nodes + 1, sizeof *w->nodes))
        return PT_ERR_NOMEM;
    pt_walk_node *n = &w->nodes[w->n_nodes];
    memset(n, 0, sizeof *n);
    n->start = start;
    n->ordinal = w->at.ordinals++;
    n->tag = tag;
    n->is_region = (uint8_t)is_region;
    n->slice_flags = slice_flags;
    if (w->scan) {
        const pt_walk *s = w->scan;
        /* renames of this call found by the scan: the last one holds */
        while (w->next_rename < s->n_renames && s->renames[w->next_rename].ordinal < n->ordinal)
            w->next_rename++;
        while (w->next_rename < s->n_renames && s->renames[w->next_rename].ordinal == n->ordinal)
            key = s->renames[w->next_rename++].key;
        while (w->next_open < s->n_open_ordinals && s->open_ordinals[w->next_open] < n->ordinal)
            w->next_open++;
        if (!is_region && w->next_open < s->n_open_ordinals &&
            s->open_ordinals[w->next_open] == n->ordinal)
            n->open_at_stop = 1;
    }
    n->key = key;
    n->exempt = (uint8_t)carrier_exempt;
    /* the scan's shown is provisional: a rename at a callee's end may change it */
    n->shown = (uint8_t)(carrier_exempt || !pt_walk_is_carrier(w, key));
    n->depth = w->shown_open;
    n->mark = w->base + w->n_records;
    n->kept_before = w->stats.slices;
    n->open_before = w->stats.open_at_stop;
    n->depth_before = w->stats.max_depth;
    n->open_at_start_before = w->stats.open_at_start;
    const pt_walk_node *up = w->n_nodes ? &w->nodes[w->n_nodes - 1] : NULL;
    n->child_parent = up ? up->child_parent : -1;
    n->child_depth = up ? up->child_depth : 0;
    w->n_nodes++;
    if (!w->scan && w->keep_durations) {
        if (pt_grow((void **)&w->durations, &w->cap_durations, w->n_durations + 1,
                         sizeof *w->durations))
            return PT_ERR_NOMEM;
        w->durations[w->n_durations++] = 0;
    }
    if (n->shown)
        w->shown_open++;
    if (w->table)
        return pt_walk_begin_table_slice(w, n);
    if (w->scan && w->scan->durations)
        return pt_walk_begin_slice(w, n);
    if (!n->shown)
        return PT_OK;
    if (w->scan || w->stream)
        return pt_walk_write(w, start, key,
                             n->slice_flags & PT_SLICE_SEEDED ? PT_RECORD_OPEN_AT_START : 0);
    return PT_OK;
}

/* Makes the node of a call that replay emits, once its tag is known. */
static int
pt_walk_materialize(pt_walk *w, pt_walk_call *call)
{
    call->pending = 0;
    uint32_t tag = call->tag, key = call->key;
    int exempt = 0;
    if (tag & PT_TAG_ARGS_BIT) {
        uint32_t index = tag & ~PT_TAG_ARGS_BIT;
        if (index < w->t.n_args && w->t.args_key[index]) {
            /* a region with args gets a key of its own (never a carrier's) */
            exempt = 1;
            if (w->scan)
                key = w->t.args_key[index];
            else if (w->args_base_key)
                w->args_base_key[index] = key;
        }
    } else if (tag && tag < w->t.n_tags) {
        uint32_t region = w->t.region_key[tag];
        if (region && region != PT_REGION_EXIT) {
            int rc = pt_walk_push_node(w, call->start, region, 0, 1, 1, 0);
            if (rc != PT_OK)
                return rc;
        }
        if (w->t.tag_key[tag])
            key = w->t.tag_key[tag];
    }
    call->node = (int64_t)w->n_nodes;
    return pt_walk_push_node(w, call->start, key, tag, 0, exempt,
                             (uint8_t)((call->is_c ? PT_SLICE_C : 0) |
                                       (call->open_at_start ? PT_SLICE_SEEDED : 0)));
}

static int pt_walk_name_step_parent(pt_walk *w, const pt_walk_node *n);

static int
pt_walk_end_node(pt_walk *w, int64_t ts, int open_at_stop)
{
    pt_walk_node *n = &w->nodes[--w->n_nodes];
    if (ts < n->start)
        return PT_ERR_ARG;      /* a damaged file's deltas: a call ends before it starts */
    if (n->shown)
        w->shown_open--;
    int shown = n->exempt || !pt_walk_is_carrier(w, n->key);
    if (w->keep_durations) {
        int rc = pt_walk_keep_duration(w, n->ordinal, ts - n->start);
        if (rc != PT_OK)
            return rc;
    }
    if (!n->is_region && (ts > w->max_end || !w->has_end)) {
        w->max_end = ts;
        w->has_end = 1;
    }
    if (w->t.min_ns && ts - n->start < w->t.min_ns) {
        /* short: it goes with everything since its begin (its subtree) */
        if (w->table) {
            w->n_table = n->mark;
        } else if (w->scan || w->stream) {
            if (n->mark < w->base)
                return PT_ERR_STATE;    /* handed out already: a bug, not bad input */
            w->n_records = n->mark - w->base;
        }
        w->stats.slices = n->kept_before;
        w->stats.open_at_stop = n->open_before;
        w->stats.max_depth = n->depth_before;
        w->stats.open_at_start = n->open_at_start_before;
        /* a step too short to keep still names its parent, as the slice table
         * names it before min_duration drops anything */
        return pt_walk_name_step_parent(w, n);
    }
    if (shown) {
        w->stats.slices++;
        w->stats.open_at_stop += open_at_stop != 0;
        w->stats.open_at_start += !n->is_region && (n->slice_flags & PT_SLICE_SEEDED);
        if (n->depth > w->stats.max_depth)
            w->stats.max_depth = n->depth;
        if (w->table)
            w->table[n->child_parent].end = ts;     /* shown: its own slice's index */
        else if (w->stream || (w->scan && !w->scan->durations))
            return pt_walk_write(w, ts, n->key,
                                 PT_RECORD_END | (open_at_stop ? PT_RECORD_OPEN_AT_STOP : 0));
    }
    uint32_t sub = shown && n->depth + 1 > n->sub_max ? n->depth + 1 : n->sub_max;
    if (w->n_nodes && sub > w->nodes[w->n_nodes - 1].sub_max)
        w->nodes[w->n_nodes - 1].sub_max = sub;
    return pt_walk_name_step_parent(w, n);
}

/* At the end of an optimizer step's tagged call n (just popped): its parent,
 * the call that ran the step, takes the step's name (found by the first pass,
 * applied by the later ones through the renames it lists). */
static int
pt_walk_name_step_parent(pt_walk *w, const pt_walk_node *n)
{
    if (!w->scan && !w->stream && w->n_nodes && !n->is_region && n->tag && !(n->tag & PT_TAG_ARGS_BIT) &&
        n->tag < w->t.n_tags && w->t.step_key[n->tag]) {
        /* An optimizer step names its parent, unless the parent is torch's own
         * region of that name (the step as torch.profiler shows it). */
        pt_walk_node *parent = &w->nodes[w->n_nodes - 1];
        uint32_t name = parent->key < w->t.n_keys ? w->t.annotation_name[parent->key] : 0;
        if (!(name && name == w->t.step_name[n->tag])) {
            parent->key = w->t.step_key[n->tag];
            if (!parent->shown && !pt_walk_is_carrier(w, parent->key)) {
                /* a carrier named: shown from now on, and what ended inside it so
                 * far is one level deeper than counted */
                parent->shown = 1;
                w->shown_open++;
                if (parent->sub_max && parent->sub_max++ > w->stats.max_depth)
                    w->stats.max_depth = parent->sub_max - 1;
            }
            if (pt_grow((void **)&w->renames, &w->cap_renames, w->n_renames + 1,
                             sizeof *w->renames))
                return PT_ERR_NOMEM;
            pt_walk_rename *r = &w->renames[w->n_renames];
            r->ordinal = parent->ordinal;
            r->order = w->n_renames++;
            r->key = parent->key;
        }
    }
    return PT_OK;
}

/* ---- the full walk's work per call ---- */

/* The top call's node, if it still waits for its tag, is made: its tag is known
 * once another call opens or the walk ends. */
static int
pt_walk_settle_top(pt_walk *w, const pt_walk_cursor *c)
{
    if (c->n && c->calls[c->n - 1].pending)
        return pt_walk_materialize(w, &c->calls[c->n - 1]);
    return PT_OK;
}

/* A call opens, at c->n. */
static int
pt_walk_call_opened(pt_walk *w, const pt_walk_cursor *c, uint32_t word, int64_t ts)
{
    int rc = pt_walk_settle_top(w, c);
    if (rc != PT_OK)
        return rc;
    uint32_t kind = word & PT_KIND_MASK, key = word >> PT_KEY_SHIFT;
    int seeded = kind == PT_EV_PY_SEED, hides_subtree;
    int hide = pt_walk_hides(w, key, seeded, &hides_subtree);
    pt_walk_call *call = &c->calls[c->n];
    call->start = ts;
    call->node = -1;
    call->key = key;
    call->tag = 0;
    call->is_c = kind == PT_EV_C_CALL;
    /* seeded when the trace began (not when a thread born later attached) */
    call->open_at_start = (uint8_t)(seeded && c->ticks == w->t.tick0);
    call->emits = !hide && !w->hiding;
    call->pending = call->emits;
    call->hides_subtree = (uint8_t)hides_subtree;
    w->hiding += call->hides_subtree;
    return PT_OK;
}

/* The call at c->n closed: its node ends, and the regions opened in it. */
static int
pt_walk_call_closed(pt_walk *w, const pt_walk_cursor *c, int64_t ts, int open_at_stop)
{
    pt_walk_call *call = &c->calls[c->n];
    int rc = PT_OK;
    if (call->pending)
        rc = pt_walk_materialize(w, call);
    if (rc == PT_OK && call->node >= 0) {
        while (rc == PT_OK && (int64_t)w->n_nodes > call->node + 1)
            rc = pt_walk_end_node(w, ts, 0);            /* regions opened in the call */
        uint32_t tag = w->nodes[call->node].tag;
        if (rc == PT_OK)
            rc = pt_walk_end_node(w, ts, open_at_stop);
        /* record_function.__exit__ closes the region opened beside it */
        if (rc == PT_OK && tag && !(tag & PT_TAG_ARGS_BIT) && tag < w->t.n_tags &&
            w->t.region_key[tag] == PT_REGION_EXIT && w->n_nodes &&
            w->nodes[w->n_nodes - 1].is_region)
            rc = pt_walk_end_node(w, ts, 0);
    }
    w->hiding -= call->hides_subtree;
    return rc;
}

/* ---- the plain scan's work per call ---- */

/* Whether this scan can be plain, and if so its per-key tables. */
static int
pt_walk_plain_begin(pt_walk *w)
{
    const pt_walk_tables *t = &w->t;
    /* tags, args and min_duration need the full walk; so does a clock mapping
     * that is not increasing (a damaged file's), which the full walk reports */
    if (t->n_tags > 1 || t->n_args || t->min_ns || !(t->ns_per_tick > 0.0) ||
        !(t->ns_per_tick < 1e12))
        return PT_OK;
    pt_walk_plain *p = &w->ps;
    p->n_shows = t->n_hidden;
    p->shows = calloc(2 * ((size_t)t->n_hidden + 1), 1);
    if (!p->shows)
        return PT_ERR_NOMEM;
    for (uint32_t key = 0; key < t->n_hidden; key++)
        /* launcher keys show when called during the trace (seeds take the slow way) */
        p->shows[key] = t->hidden[key] == 0 || t->hidden[key] == PT_HIDE_SEEDED ||
                        t->hidden[key] == PT_HIDE_STARTUP;
    p->shows[t->n_hidden] = 1;
    p->hidden_now = p->shows + t->n_hidden + 1;
    p->now_ticks = w->at.ticks;
    w->plain = 1;
    return PT_OK;
}

static inline uint8_t
pt_walk_plain_flags(const pt_walk *w, const pt_walk_cursor *c, uint64_t i)
{
    return c->words[i] & PT_PLAIN_SPECIAL ? w->ps.flags[i] : PT_PLAIN_EMITS | PT_PLAIN_SHOWN;
}

/* A call opens, at c->n, counted as the full walk's pt_walk_call_opened and
 * pt_walk_push_node count it. inline_loop: pt_walk_run's inline case, a call (not
 * a seed) of a key that shows, nothing hiding. Returns 1 when it is not a plain
 * shown call (its word is then marked). */
static inline __attribute__((always_inline)) int
pt_walk_plain_opened(pt_walk *w, pt_walk_cursor *c, const int durations, uint32_t word,
                     int64_t ns, const int inline_loop)
{
    uint64_t i = c->n;
    if (inline_loop) {
        c->ords[i] = c->ordinals++;
        if (durations)
            c->starts[i] = ns;
        c->deepest = i > c->deepest ? i : c->deepest;   /* its depth: pt_walk_run */
        return 0;
    }
    pt_walk_plain *p = &w->ps;
    uint32_t kind = word & PT_KIND_MASK, key = word >> PT_KEY_SHIFT;
    int seeded = kind == PT_EV_PY_SEED, hides;
    int emits = !pt_walk_hides(w, key, seeded, &hides) && !w->hiding;
    int shown = emits && !pt_walk_is_carrier(w, key);
    uint8_t flags = (uint8_t)((emits ? PT_PLAIN_EMITS : 0) | (shown ? PT_PLAIN_SHOWN : 0) |
                              (hides ? PT_PLAIN_HIDES : 0));
    p->flags[i] = flags;
    if (emits) {
        c->ords[i] = c->ordinals++;
        if (durations)
            c->starts[i] = ns;
    }
    if (shown) {
        uint64_t depth = i - p->unshown_open;
        if (depth > w->stats.max_depth)
            w->stats.max_depth = (uint32_t)depth;
        /* seeded when the trace began: open at start (as the full walk counts) */
        w->stats.open_at_start += seeded && c->ticks == w->t.tick0;
    } else {
        p->unshown_open++;
        p->unshown += emits;
    }
    w->hiding += hides;
    return flags != (PT_PLAIN_EMITS | PT_PLAIN_SHOWN);
}

/* The call at c->n closed at ns. inline_loop: pt_walk_run's inline case (its word
 * unmarked: a plain shown call). */
static inline __attribute__((always_inline)) int
pt_walk_plain_closed(pt_walk *w, const pt_walk_cursor *c, const int durations, int64_t ns,
                     uint32_t *durations_of, const int inline_loop)
{
    uint64_t i = c->n;
    uint8_t flags = inline_loop ? PT_PLAIN_EMITS | PT_PLAIN_SHOWN : pt_walk_plain_flags(w, c, i);
    if (!inline_loop) {
        w->ps.unshown_open -= !(flags & PT_PLAIN_SHOWN);
        w->hiding -= (flags & PT_PLAIN_HIDES) != 0;
    }
    if (durations && (flags & PT_PLAIN_EMITS)) {
        int64_t d = ns - c->starts[i];
        if (d >= UINT32_MAX)
            return pt_walk_keep_duration(w, c->ords[i], d);
        durations_of[c->ords[i]] = (uint32_t)d;
    }
    return PT_OK;
}

/* ---- the pairing engine (see the header comment) ---- */

/* How calls and returns pair. A call's pairing word is its event's key_kind, a
 * seed's made a Python call's; a return's with bit 0 cleared is its call's. */
_Static_assert(PT_EV_PY_RETURN == (PT_EV_PY_CALL | 1) && PT_EV_C_RETURN == (PT_EV_C_CALL | 1) &&
               !(PT_EV_PY_CALL & 1) && !(PT_EV_C_CALL & 1),
               "a return's kind is its call's with bit 0 set");

static inline uint32_t
pt_walk_call_word(uint32_t key_kind)
{
    return (key_kind & PT_KIND_MASK) == PT_EV_PY_SEED
        ? (key_kind & ~(uint32_t)PT_KIND_MASK) | PT_EV_PY_CALL : key_kind;
}

/* The rule: a return closes the innermost open call of its key and kind, and the
 * calls open above it (their returns were never seen) close with it; with none
 * open it closes nothing (a frame entered before tracing, deeper than the seeded
 * stack). words: the open calls' pairing words, innermost last (bit 0 is ignored:
 * the plain scan marks words with it). Returns how many calls stay open (n: none
 * closes). */
static inline uint64_t
pt_walk_closes(const uint32_t *words, uint64_t n, uint32_t return_word)
{
    uint32_t call = return_word & ~(uint32_t)1;
    for (uint64_t i = n; i > 0; i--)
        if ((words[i - 1] & ~(uint32_t)1) == call)
            return i - 1;
    return n;
}

/* The rule's commonest case, tested inline: the return of the top call, its word
 * unmarked (with no call open, words[-1] is PT_WALK_BOTTOM, which no word equals;
 * nor does any event that is not a return, its word's bit 0 flipped). */
static inline int
pt_walk_closes_top(const uint32_t *words, uint64_t n, uint32_t word)
{
    return words[n - 1] == (word ^ 1);
}

/* Makes room for `more` calls opened (the engine pushes without a check): the
 * stack and what the walk keeps per call beside it. */
static int
pt_walk_grow_calls(pt_walk *w, uint64_t more)
{
    pt_walk_cursor *c = &w->at;
    uint64_t cap = w->cap_calls ? w->cap_calls : 64;
    while (cap - c->n < more)
        cap *= 2;
    int ok = 1;
    uint32_t *slots = realloc(w->slots, (cap + 1) * sizeof *slots);
    if (slots) {
        w->slots = slots;
        slots[0] = PT_WALK_BOTTOM;
        c->words = slots + 1;
    }
    ok = ok && slots;
    if (!w->plain) {
        pt_walk_call *calls = realloc(c->calls, cap * sizeof *calls);
        if (calls)
            c->calls = calls;
        ok = ok && calls;
    } else {
        uint64_t *ords = realloc(c->ords, cap * sizeof *ords);
        if (ords)
            c->ords = ords;
        int64_t *starts = realloc(c->starts, cap * sizeof *starts);
        if (starts)
            c->starts = starts;
        uint8_t *flags = realloc(w->ps.flags, cap);
        if (flags)
            w->ps.flags = flags;
        ok = ok && ords && starts && flags;
    }
    if (!ok)
        return PT_ERR_NOMEM;
    w->cap_calls = cap;
    return PT_OK;
}

/* Room for `more` calls opened, and for their durations when kept (sized by a
 * first scan's count, so rarely grown). */
static inline int
pt_walk_room(pt_walk *w, const int mode, uint64_t more)
{
    if (w->cap_calls - w->at.n < more && pt_walk_grow_calls(w, more) != PT_OK)
        return PT_ERR_NOMEM;
    if (mode == PT_WALK_PLAIN_DURATIONS &&
        pt_grow((void **)&w->durations, &w->cap_durations, w->at.ordinals + more,
                     sizeof *w->durations))
        return PT_ERR_NOMEM;
    return PT_OK;
}

/* The push: a call (or seed) opens at ns. inline_loop: pt_walk_run's inline case,
 * a call (not a seed; in the plain scan a plain one). */
static inline __attribute__((always_inline)) int
pt_walk_open(pt_walk *w, pt_walk_cursor *c, const int mode, uint32_t word, int64_t ns,
             const int inline_loop)
{
    uint32_t entry = inline_loop ? word : pt_walk_call_word(word);
    int rc = PT_OK;
    if (mode == PT_WALK_FULL)
        rc = pt_walk_call_opened(w, c, word, ns);
    else if (pt_walk_plain_opened(w, c, mode == PT_WALK_PLAIN_DURATIONS, word, ns, inline_loop))
        entry |= PT_PLAIN_SPECIAL;
    if (rc == PT_OK)
        c->words[c->n++] = entry;
    return rc;
}

/* The pop: the top call closes at ns (open_at_stop: the trace stopped first).
 * inline_loop: pt_walk_run's inline case, the return of the top call, unmarked. */
static inline __attribute__((always_inline)) int
pt_walk_close(pt_walk *w, pt_walk_cursor *c, const int mode, int64_t ns, int open_at_stop,
              uint32_t *durations_of, const int inline_loop)
{
    c->n--;
    if (mode == PT_WALK_FULL)
        return pt_walk_call_closed(w, c, ns, open_at_stop);
    return pt_walk_plain_closed(w, c, mode == PT_WALK_PLAIN_DURATIONS, ns, durations_of,
                                inline_loop);
}

/* A return at ns: the calls it closes (pt_walk_closes) close. */
static inline __attribute__((always_inline)) int
pt_walk_return(pt_walk *w, pt_walk_cursor *c, const int mode, uint32_t word, int64_t ns)
{
    uint64_t stay_open = pt_walk_closes(c->words, c->n, word);
    while (c->n > stay_open) {
        int rc = pt_walk_close(w, c, mode, ns, 0, w->durations, 0);
        if (rc != PT_OK)
            return rc;
    }
    return PT_OK;
}

/* Any event, on the walk's own cursor (after room for a push was made). */
static inline __attribute__((always_inline)) int
pt_walk_event(pt_walk *w, const pt_event *ev, const int mode)
{
    pt_walk_cursor *c = &w->at;
    uint32_t word = ev->key_kind, kind = word & PT_KIND_MASK;
    int aux = kind > PT_EV_PY_SEED;    /* never 5, 6 (reserved): pt_validate_events refuses them */
    if (mode != PT_WALK_FULL) {
        /* the plain scan checks the clock's sums (a damaged file's deltas must not
         * wrap around); the full walk finds time running backwards instead */
        if (__builtin_add_overflow(c->ticks, (int64_t)pt_event_ticks(ev), &c->ticks))
            return PT_ERR_ARG;
        if (aux)
            return PT_OK;   /* no tags or args in a plain scan: it names nothing */
    } else if (aux) {
        c->ticks += (int64_t)pt_event_ticks(ev);
        /* a sub-kind not known here is skipped (its delta counts) */
        int is_args = pt_is_aux(word, PT_AUX_ARGS);
        if (is_args || pt_is_aux(word, PT_AUX_TAG)) {
            if (w->stream)
                w->stale = 1;   /* a name or region decided later: the scan's to know */
            uint32_t index = pt_aux_payload(word);
            if (c->n && c->calls[c->n - 1].emits)
                c->calls[c->n - 1].tag = is_args ? index | PT_TAG_ARGS_BIT : index;
        }
        return PT_OK;
    } else {
        c->ticks += ev->delta;
    }
    int64_t ns = pt_walk_ns(w, c->ticks);
    if (mode == PT_WALK_FULL && ns < w->now && w->has_now)
        return PT_ERR_ARG;          /* time ran backwards: a damaged file's deltas */
    int rc = kind == PT_EV_PY_RETURN || kind == PT_EV_C_RETURN
        ? pt_walk_return(w, c, mode, word, ns)
        : pt_walk_open(w, c, mode, word, ns, 0);
    if (mode != PT_WALK_FULL) {
        w->ps.now_ticks = c->ticks;
    } else if (rc == PT_OK) {
        w->now = ns;
        w->has_now = 1;
    }
    return rc;
}

/* pt_walk_event out of line, made once per mode */
static __attribute__((noinline)) int
pt_walk_any_event(pt_walk *w, const pt_event *ev, int mode)
{
    if (mode == PT_WALK_FULL)
        return pt_walk_event(w, ev, PT_WALK_FULL);
    if (mode == PT_WALK_PLAIN)
        return pt_walk_event(w, ev, PT_WALK_PLAIN);
    return pt_walk_event(w, ev, PT_WALK_PLAIN_DURATIONS);
}

#define PT_WALK_BLOCK 1024      /* events between checks of room and of the clock */

/* The engine: events in, calls paired. A block of events at a time: room for its
 * pushes is made before it; a call and the return of the top call are taken
 * inline, and the first other event ends the block (pt_walk_event). The plain
 * scan takes only plain calls inline; its cursor is a copy in registers, and its
 * block's deltas cannot carry the clock past INT64_MAX, so it checks neither. */
static inline __attribute__((always_inline)) int
pt_walk_run(pt_walk *w, const pt_event *ev, const pt_event *end, const int mode)
{
    const int plain = mode != PT_WALK_FULL;
    const uint32_t n_shows = w->ps.n_shows;
    const int64_t tick0 = w->t.tick0, ns0 = w->t.ns0;
    const double ns_per_tick = w->t.ns_per_tick;
    const int64_t limit = INT64_MAX - (int64_t)PT_WALK_BLOCK * UINT32_MAX;
    int rc = PT_OK;
    while (ev < end && rc == PT_OK) {
        const pt_event *stop = end - ev > PT_WALK_BLOCK ? ev + PT_WALK_BLOCK : end;
        rc = pt_walk_room(w, mode, (uint64_t)(stop - ev));
        if (rc != PT_OK)
            break;
        if (plain && w->at.ticks > limit) {
            for (; ev < stop && rc == PT_OK; ev++)      /* near the end of the clock */
                rc = pt_walk_any_event(w, ev, mode);
            continue;
        }
        pt_walk_cursor regs = w->at, *c = plain ? &regs : &w->at;
        /* inside a hidden subtree every call leaves the plain scan's loop; its
         * returns do too, as the words above the hiding one are marked */
        const uint8_t *shows = w->hiding ? w->ps.hidden_now : w->ps.shows;
        uint32_t *durations_of = w->durations;
        if (plain)
            c->deepest = w->ps.unshown_open;
        const pt_event *block = ev;
        for (; ev < stop; ev++) {
            uint32_t word = ev->key_kind;
            int64_t ns;
            if (!(word & (PT_EV_PY_RETURN | PT_EV_PY_SEED))) {    /* PY_CALL or C_CALL */
                uint32_t key = word >> PT_KEY_SHIFT;
                if (plain && !shows[key < n_shows ? key : n_shows])
                    break;
                c->ticks += ev->delta;
                ns = pt_walk_ns_of(c->ticks, tick0, ns0, ns_per_tick);
                if (!plain && ns < w->now && w->has_now) {
                    rc = PT_ERR_ARG;    /* time ran backwards: a damaged file's deltas */
                    break;
                }
                rc = pt_walk_open(w, c, mode, word, ns, 1);
            } else if (pt_walk_closes_top(c->words, c->n, word)) {
                c->ticks += ev->delta;
                ns = pt_walk_ns_of(c->ticks, tick0, ns0, ns_per_tick);
                if (!plain && ns < w->now && w->has_now) {
                    rc = PT_ERR_ARG;
                    break;
                }
                rc = pt_walk_close(w, c, mode, ns, 0, durations_of, 1);
            } else {
                break;
            }
            if (rc != PT_OK)
                break;
            if (!plain) {
                w->now = ns;
                w->has_now = 1;
            }
        }
        if (plain) {
            if (ev > block)
                w->ps.now_ticks = regs.ticks;
            /* the plain calls pushed were shown, over the unshown ones below them */
            if (regs.deepest - w->ps.unshown_open > w->stats.max_depth)
                w->stats.max_depth = (uint32_t)(regs.deepest - w->ps.unshown_open);
            w->at = regs;
        }
        if (ev < stop && rc == PT_OK)
            rc = pt_walk_any_event(w, ev++, mode);      /* the event that ended the block */
    }
    return rc;
}

/* The calls open at stop close then. */
static inline __attribute__((always_inline)) int
pt_walk_close_all(pt_walk *w, const int mode, int64_t stop_ns)
{
    int rc = PT_OK;
    while (rc == PT_OK && w->at.n)
        rc = pt_walk_close(w, &w->at, mode, stop_ns, 1, w->durations, 0);
    return rc;
}

/* ---- feeding and finishing ---- */

int
pt_walk_feed(pt_walk *w, const pt_event *events, uint64_t n)
{
    if (w->finished)
        return PT_ERR_STATE;
    if (!w->plain)
        return pt_walk_run(w, events, events + n, PT_WALK_FULL);
    return w->keep_durations ? pt_walk_run(w, events, events + n, PT_WALK_PLAIN_DURATIONS)
                             : pt_walk_run(w, events, events + n, PT_WALK_PLAIN);
}

/* The plain scan's finish, as the full walk's */
static inline __attribute__((always_inline)) int
pt_walk_plain_finish(pt_walk *w, const int mode)
{
    const pt_walk_cursor *c = &w->at;
    int64_t stop_ns = pt_walk_ns(w, w->t.stop_ticks);
    uint64_t open = 0;
    for (uint64_t i = 0; i < c->n; i++)
        open += (pt_walk_plain_flags(w, c, i) & PT_PLAIN_EMITS) != 0;
    int rc = PT_OK;
    /* a call open at stop that began after it would stick out, and times beyond
     * what nanoseconds hold would wrap (damaged deltas or clock) */
    double span = ((double)w->ps.now_ticks - (double)w->t.tick0) * w->t.ns_per_tick;
    if ((open && stop_ns < pt_walk_ns(w, w->ps.now_ticks)) || !(span < 9e18 && span > -9e18))
        rc = PT_ERR_ARG;
    if (rc == PT_OK) {
        w->open_ordinals = malloc((open ? open : 1) * sizeof *w->open_ordinals);
        if (!w->open_ordinals)
            rc = PT_ERR_NOMEM;
    }
    for (uint64_t i = 0; rc == PT_OK && i < c->n; i++) {
        uint8_t flags = pt_walk_plain_flags(w, c, i);
        if (flags & PT_PLAIN_EMITS)
            w->open_ordinals[w->n_open_ordinals++] = c->ords[i];
        w->stats.open_at_stop += (flags & PT_PLAIN_SHOWN) != 0;
    }
    if (rc == PT_OK)
        rc = pt_walk_close_all(w, mode, stop_ns);
    /* every shown call ended once (at its return or at stop) */
    w->stats.slices = c->ordinals - w->ps.unshown;
    if (mode == PT_WALK_PLAIN_DURATIONS)
        w->n_durations = c->ordinals;
    if (rc == PT_OK && w->n_long)
        qsort(w->long_durations, w->n_long, sizeof *w->long_durations, pt_walk_compare_long);
    w->finished = 1;
    return rc;
}

int
pt_walk_finish(pt_walk *w)
{
    if (w->finished)
        return PT_OK;
    if (w->plain)
        return w->keep_durations ? pt_walk_plain_finish(w, PT_WALK_PLAIN_DURATIONS)
                                 : pt_walk_plain_finish(w, PT_WALK_PLAIN);
    int64_t stop_ns = pt_walk_ns(w, w->t.stop_ticks);
    int rc = pt_walk_settle_top(w, &w->at);
    /* calls open at stop end then; one that ended after it would stick out */
    if (rc == PT_OK && w->has_now && stop_ns < w->now && w->n_nodes)
        rc = PT_ERR_ARG;
    if (rc == PT_OK && !w->scan && !w->stream) {
        /* the shown calls open at stop, for the emitting walk's begins */
        uint64_t open = 0;
        for (uint64_t i = 0; i < w->n_nodes; i++)
            open += !w->nodes[i].is_region;
        w->open_ordinals = malloc((open ? open : 1) * sizeof *w->open_ordinals);
        if (!w->open_ordinals)
            return PT_ERR_NOMEM;
        for (uint64_t i = 0; i < w->n_nodes; i++)
            if (!w->nodes[i].is_region)
                w->open_ordinals[w->n_open_ordinals++] = w->nodes[i].ordinal;
    }
    if (rc == PT_OK)
        rc = pt_walk_close_all(w, PT_WALK_FULL, stop_ns);
    /* regions opened at the top level close with the thread's last call */
    while (rc == PT_OK && w->n_nodes)
        rc = pt_walk_end_node(w, w->max_end, 0);
    if (rc == PT_OK && !w->scan && !w->stream) {
        /* Emitting walks meet calls in ordinal order: sorted once here, then only
         * read (several walks may use one scan at once, the GIL released). */
        if (w->n_renames)
            qsort(w->renames, w->n_renames, sizeof *w->renames, pt_walk_compare_renames);
        if (w->n_long)
            qsort(w->long_durations, w->n_long, sizeof *w->long_durations,
                  pt_walk_compare_long);
    }
    w->finished = 1;
    return rc;
}

int
pt_walk_get_stats(const pt_walk *w, pt_walk_stats *out)
{
    *out = w->stats;
    out->calls_begun = w->at.ordinals;
    return PT_OK;
}

int
pt_walk_args_keys(const pt_walk *w, uint32_t *out, uint32_t n)
{
    if (!w->args_base_key || n > w->t.n_args)
        return PT_ERR_ARG;
    memcpy(out, w->args_base_key, n * sizeof *out);
    return PT_OK;
}

uint64_t
pt_walk_ready(const pt_walk *w, const pt_walk_record **records)
{
    *records = w->records;
    if (w->finished || !w->t.min_ns)
        return w->n_records;
    /* the outermost open node that may still turn out short bounds what is final;
     * nested nodes began later, so the first such from the bottom is it. An open
     * call ends at `now` or later; a region opened at the top level ends with the
     * thread's last call, so at the latest end seen or later. */
    int top_level = 1;
    for (uint64_t i = 0; i < w->n_nodes; i++) {
        const pt_walk_node *n = &w->nodes[i];
        top_level = top_level && n->is_region;
        int64_t ends_after = top_level ? (w->has_end ? w->max_end : n->start) : w->now;
        if (ends_after - n->start < w->t.min_ns)
            return n->mark - w->base;
    }
    return w->n_records;
}

void
pt_walk_consume(pt_walk *w, uint64_t n)
{
    if (n > w->n_records)
        n = w->n_records;
    if (n < w->n_records)   /* (no records yet: records may be NULL, which memmove may not get) */
        memmove(w->records, w->records + n, (w->n_records - n) * sizeof *w->records);
    w->n_records -= n;
    w->base += n;
}

int
pt_walk_keep_durations(pt_walk *w, uint64_t expected)
{
    if (w->scan || w->stream || w->at.ordinals)
        return PT_ERR_STATE;        /* a scan, before it is fed */
    /* sized once (a first scan counted the calls): no doubling slack */
    if (expected && pt_grow((void **)&w->durations, &w->cap_durations, expected,
                                 sizeof *w->durations) == PT_OK &&
        w->cap_durations > expected) {
        uint32_t *exact = realloc(w->durations, expected * sizeof *w->durations);
        if (exact) {
            w->durations = exact;
            w->cap_durations = expected;
        }
    }
    w->keep_durations = 1;
    return PT_OK;
}

uint64_t
pt_walk_ready_slices(const pt_walk *w, const pt_slice **slices, uint64_t *first_index)
{
    *slices = w->slices;
    *first_index = w->slices_base;
    return w->n_slices;
}

void
pt_walk_consume_slices(pt_walk *w)
{
    w->slices_base += w->n_slices;
    w->n_slices = 0;
}

int
pt_walk_fill_table(pt_walk *w, pt_slice *out, uint64_t cap)
{
    if (!w->scan || w->at.ordinals || w->table)
        return PT_ERR_STATE;        /* an emitting walk, before it is fed */
    w->table = out;
    w->cap_table = cap;
    return PT_OK;
}

uint64_t
pt_walk_table_count(const pt_walk *w)
{
    return w->n_table;
}
