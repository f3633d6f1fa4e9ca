/* pt_read.h - reading: a stopped tracer's threads, keys and events, the
 * streaming walk that turns events into calls (pt_walk.c: every trace's calls,
 * exports, summary and slice table come from it), and what reads saved files
 * back (events and slices checked, our Chrome JSON and .pftrace). Part of the
 * interface cffi sees (see pt_record.h).
 */
#ifndef PT_READ_H
#define PT_READ_H

#include "pt_record.h"

typedef struct {
    uint64_t tstate_id;     /* PyThreadState_GetID: unique for the process's life */
    uint64_t ident;         /* threading.get_ident() */
    uint64_t native_id;     /* OS thread id */
    uint64_t n_events;      /* events held */
    uint64_t dropped;       /* events lost (allocation failure) */
    int64_t base_ticks;     /* the clock reading the first delta counts from */
    uint64_t spilled;       /* events written to the spill file */
} pt_thread_info;

/* One call: a call paired with its return (a slice of the trace's table). */
typedef struct {
    int64_t start;          /* ns */
    int64_t end;            /* ns */
    uint32_t key;
    uint32_t flags;         /* PT_SLICE_* */
    int64_t parent;         /* index of the enclosing slice on the same thread, or -1 */
    uint32_t tag;           /* what the watcher said of this call, 0 = nothing */
    uint32_t depth;         /* emitted ancestors on this thread: 0 for a root */
} pt_slice;

#define PT_SLICE_C 1            /* a built-in call (else Python) */
/* Running when its thread's tracing began with the trace (start(), a forked
 * child's start): drawn from the start, marked "open at start" in exports, and
 * no call in the counts (it began before the trace). A thread attached later
 * (born while tracing) has its frames seeded too, but they began in the trace:
 * they are ordinary calls. */
#define PT_SLICE_SEEDED 2
#define PT_SLICE_OPEN_AT_STOP 4 /* still running at stop: ended at stop time */

/* ---- a stopped tracer's threads, keys and events ---- */
int pt_thread_count(pt_tracer *tracer);
/* O(chunks): stop() reads every thread's info, so no event is read here. */
int pt_thread_get_info(pt_tracer *tracer, int index, pt_thread_info *out);
/* pt_thread_get_info of threads 0 .. n-1 into out[0 .. n-1], in one call. */
int pt_thread_infos(pt_tracer *tracer, pt_thread_info *out, int n);
/* What stop() needs of a stopped tracer, in one call (each call through cffi
 * costs ~0.5 us, and an empty stop() made a dozen): its clock readings at start
 * and stop, the realtime anchors (as pt_realtime_anchor gives them), its thread
 * count and sticky error, and a clock pair read now (pt_clock_pair: the ticks ->
 * ns slope). PT_ERR_STATE unless stopped. */
typedef struct {
    int64_t start_ns;
    int64_t start_ticks;
    int64_t stop_ticks;
    int64_t now_ticks;
    int64_t now_ns;
    int64_t anchor[6];      /* at start, then at stop: monotonic ns, realtime ns, spread */
    int32_t n_threads;
    int32_t hot_error;
} pt_stop_facts;
int pt_get_stop_facts(pt_tracer *tracer, int use_tsc, pt_stop_facts *out);
/* Whether the thread's calls, paired with their returns as the walk pairs them (a
 * return closes the innermost open call of its key and kind, and the calls open
 * inside it; one that matches none is ignored), leave any call open at its last
 * event: 1 yes, 0 no, a status < 0 for a bad index or a running tracer. Reads
 * each event once and nothing else (no key table): a thread that ended with its
 * calls closed is told apart at memory speed. */
int pt_thread_ends_open(pt_tracer *tracer, int index);
uint32_t pt_key_count(pt_tracer *tracer);
/* Copies the first n keys' flags into out (PT_KEY_SKIPPED: left out by the
 * include/exclude filters). */
#define PT_KEY_SKIPPED 2
#define PT_KEY_NAMED 16     /* left out by the filters but kept: the watcher names its calls */
int pt_key_flags(pt_tracer *tracer, uint8_t *out, uint32_t n);
/* Appends, for keys first..count-1, what names each key to py_list: a code
 * object, or a (owner, name) tuple for a built-in (owner a module, a type or None). */
int pt_key_sources(pt_tracer *tracer, uint32_t first, void *py_list);
/* A view of a thread's held events from event `first` on (up to the end of the
 * chunk holding it; *n 0 past the end), and the clock the first held one counts from. */
int pt_thread_events_at(pt_tracer *tracer, int index, uint64_t first, const pt_event **events,
                        uint64_t *n, int64_t *base_ticks);

/* ---- events into calls: the streaming walk (pt_walk.c) ----
 *
 * How calls are hidden, per key (pt_walk_tables.hidden). Calls whose key has hidden[key] ==
 * PT_HIDE_SUBTREE are dropped with everything they call, except seeded frames;
 * those and PT_HIDE_ALONE keys are dropped alone (their callees are the user's).
 * PT_HIDE_SEEDED keys are dropped alone when seeded and kept when called during
 * the trace: a launcher's frames below the program (runpy under python -m) are
 * not the program's, but the program may call the same code itself.
 * PT_HIDE_STARTUP keys are dropped with everything they call when seeded (the
 * interpreter's start-up, site and importlib, running when a followed child's
 * bootstrap starts tracing: what they run until they return is not the
 * program's either) and kept when called during the trace. */
#define PT_HIDE_SUBTREE 1
#define PT_HIDE_ALONE 2
#define PT_HIDE_SEEDED 3
#define PT_HIDE_STARTUP 5
/* Kept while calls are paired, for what it carries (a torch region's
 * __enter__/__exit__, an optimizer step's hook: code the filters leave out but
 * whose calls the watcher names), then left out alone once names are given. */
#define PT_HIDE_CARRIER 4
/* A tag's region_key (pt_walk_tables) for record_function.__exit__: it closes the
 * innermost region opened beside it. */
#define PT_REGION_EXIT 0xFFFFFFFF
/* Streaming walk: one thread's calls from its events, fed a run at a time, with
 * everything a trace does to them (hiding, torch regions, min_duration, tagged
 * names, carriers), without a slice table. The tables are the caller's and must
 * outlive the walk. Per tag (below n_tags): region_key, the key of the torch
 * region a tagged call (record_function.__enter__) opens, from its start to the
 * end of the call that closes it (PT_REGION_EXIT; unclosed, the enclosing
 * call's end), or 0; tag_key, a module call's key (else 0); step_key, the key
 * an optimizer step gives its parent (else 0), unless the parent's key has
 * annotation_name[key] (n_keys entries, 0 for no annotation) equal to
 * step_name[tag]. Per args index (below n_args): args_key, the key of a region
 * with those args (0: keep its key; the scan only needs nonzero for "has args").
 * Walk a thread twice: first a scan (pt_walk_new with scan NULL; no output; its
 * stats are the trace's counts), then an emitting walk given that scan, whose
 * records (begin and end, in time order) pt_walk_ready hands out once final.
 * Feeding after pt_walk_finish: PT_ERR_STATE. */
typedef struct {
    const uint8_t *hidden;
    uint32_t n_hidden;
    uint32_t n_tags;
    const uint32_t *region_key;
    const uint32_t *tag_key;
    const uint32_t *step_key;
    const uint32_t *step_name;
    const uint32_t *annotation_name;
    uint32_t n_keys;
    uint32_t n_args;
    const uint32_t *args_key;
    int64_t min_ns;
    int64_t tick0;
    int64_t ns0;
    double ns_per_tick;
    int64_t stop_ticks;
} pt_walk_tables;
typedef struct {
    uint64_t slices;        /* calls (and regions) the trace shows */
    uint64_t open_at_stop;  /* of them, still running at stop */
    uint32_t max_depth;     /* deepest depth of a shown call */
    uint32_t open_at_start; /* of the slices, running when the trace began (PT_SLICE_SEEDED) */
    uint64_t calls_begun;   /* calls and regions begun so far (where a walk failed) */
} pt_walk_stats;
typedef struct {
    int64_t ts;             /* ns */
    uint32_t key;
    uint32_t flags;         /* PT_RECORD_* */
} pt_walk_record;
#define PT_RECORD_END 1             /* else a begin */
#define PT_RECORD_OPEN_AT_STOP 2    /* the end of a call still running at stop */
#define PT_RECORD_OPEN_AT_START 4   /* a begin of a call running when the trace began */
typedef struct pt_walk pt_walk;
/* Returns a new walk (pt_walk_free it), NULL when out of memory or given a scan
 * not finished. The scan must outlive the emitting walk; several emitting walks
 * may share it. base_ticks: the clock the first event's delta counts from. */
pt_walk *pt_walk_new(const pt_walk_tables *tables, const pt_walk *scan, int64_t base_ticks);
/* A stream (see pt_walk.c): an emitting walk without a scan, fed as events are
 * recorded; its end records of calls open at stop say so. pt_walk_stream_keys
 * gives it the hidden table as it grows; pt_walk_stale says it met a tag or
 * args (what only a scan decides): its records are then not the trace's. */
pt_walk *pt_walk_new_stream(const pt_walk_tables *tables, int64_t base_ticks);
void pt_walk_stream_keys(pt_walk *walk, const uint8_t *hidden, uint32_t n_hidden);
void pt_walk_stream_stop(pt_walk *walk, int64_t stop_ticks);
int pt_walk_stale(const pt_walk *walk);
void pt_walk_free(pt_walk *walk);
int pt_walk_feed(pt_walk *walk, const pt_event *events, uint64_t n);
/* Closes the calls open at stop (and the top-level regions). */
int pt_walk_finish(pt_walk *walk);
int pt_walk_get_stats(const pt_walk *walk, pt_walk_stats *out);
/* A finished scan: per args index, the key of the call the args were recorded
 * on (0xFFFFFFFF: none). */
int pt_walk_args_keys(const pt_walk *walk, uint32_t *out, uint32_t n);
/* The records that are final, and how many; pt_walk_consume drops the first n. */
uint64_t pt_walk_ready(const pt_walk *walk, const pt_walk_record **records);
void pt_walk_consume(pt_walk *walk, uint64_t n);
/* Slices mode, for exports that want each call whole and in start order (JSON):
 * a scan told to keep durations (before it is fed; 4 bytes a call, room made for
 * `expected` calls: a first scan's calls_begun) gives an
 * emitting walk that writes pt_slices instead of records, numbered (parent,
 * depth) as the slice table numbers them, each final at once. pt_walk_ready_slices
 * hands them out with the index of the first; pt_walk_consume_slices drops them. */
int pt_walk_keep_durations(pt_walk *walk, uint64_t expected);
uint64_t pt_walk_ready_slices(const pt_walk *walk, const pt_slice **slices,
                              uint64_t *first_index);
void pt_walk_consume_slices(pt_walk *walk);
/* Table mode, for the slice table (Trace.thread_slices): an emitting walk told,
 * before it is fed, to write each shown call into out (cap entries; the scan's
 * calls_begun is enough), numbered and flagged as slices mode writes them, its
 * end set when it ends; min_duration cuts the table back. After pt_walk_finish
 * pt_walk_table_count says how many it holds. PT_ERR_STATE: not an emitting walk
 * before it is fed; feeding: PT_ERR_ARG when cap is short. */
int pt_walk_fill_table(pt_walk *walk, pt_slice *out, uint64_t cap);
uint64_t pt_walk_table_count(const pt_walk *walk);

/* ---- slice tables, and what reads events and slices back from files
 * (pt_tables.c, pt_jsonlines.c, pt_pfread.c) ---- */
/* How many slices were closed at stop time (PT_SLICE_OPEN_AT_STOP). */
uint64_t pt_open_at_stop(const pt_slice *slices, uint64_t n);
/* How many slices were running at the trace's start (PT_SLICE_SEEDED). */
uint64_t pt_open_at_start(const pt_slice *slices, uint64_t n);
uint32_t pt_max_depth(const pt_slice *slices, uint64_t n);
/* A process's slices in a trace joined from several (processes.joined_trace):
 * copies in[0..n) to out with each key k replaced by key_map[k] (the union key
 * table's), start and end moved by shift_ns (another host's clock onto the first
 * process's) and tag cleared (it indexes the process's own tag table, which the
 * joined trace does not carry). Parents, depths and flags stay. PT_ERR_ARG when a
 * key is n_map or more or a time would overflow: out then holds the slices
 * before it. */
int pt_remap_slices(const pt_slice *in, uint64_t n, const uint32_t *key_map, uint32_t n_map,
                    int64_t shift_ns, pt_slice *out);
/* Checks events read from a file: a known kind (5 and 6 are reserved), call,
 * return and seed keys below n_keys, TAG aux events' indexes below n_tags, ARGS
 * ones' below n_args (one of another sub-kind passes: readers skip it). -1 if all
 * hold, else the index of the first event that breaks one. */
int64_t pt_validate_events(const pt_event *events, uint64_t n, uint32_t n_keys, uint32_t n_tags,
                           uint32_t n_args);
/* The ticks a run of events advances its thread's clock by (mod 2^64): where
 * the next spilled block of the thread must start. */
uint64_t pt_events_ticks(const pt_event *events, uint64_t n);
/* Events read from a version-1 file made this version's, in place: its kinds 5
 * (TAG), 6 (ARGS) and 7 (TIME), whose whole key was the index or the pause's
 * high bits, become aux events. -1 when all could be, else the index of the first
 * whose key does not fit an aux event's payload (2^26; it and those after it are left
 * as they were). */
int64_t pt_events_from_v1(pt_event *events, uint64_t n);
/* Raises needed[0] to one past the largest key a call, return or seed names,
 * needed[1] past the largest tag index, needed[2] past the largest annotation
 * args index: what a process killed before writing meta.json must have had. */
void pt_events_extent(const pt_event *events, uint64_t n, uint64_t needed[3]);
/* Checks slices read from a file: keys below n_keys, known flags, parents
 * earlier in the thread and enclosing their children. -1 if all hold, else the
 * index of the first slice that breaks one. */
int64_t pt_validate_slices(const pt_slice *slices, uint64_t n, uint32_t n_keys);
/* The same checks on a thread's slices fed in batches (load() of slices.bin),
 * holding only the open ancestors; a parent must also be one of them (a thread's
 * calls come parent first, each subtree whole). pt_slice_check_feed returns -1
 * when all hold, the thread-wide index of the first slice that breaks one, or -2
 * when out of memory; pt_slice_check_stats: slices checked, those open at stop
 * and the deepest depth. */
typedef struct pt_slice_check pt_slice_check;
pt_slice_check *pt_slice_check_new(void);
void pt_slice_check_free(pt_slice_check *check);
int64_t pt_slice_check_feed(pt_slice_check *check, const pt_slice *slices, uint64_t n,
                            uint32_t n_keys);
void pt_slice_check_stats(const pt_slice_check *check, uint64_t *count,
                          uint64_t *open_at_stop, uint32_t *max_depth);
/* Reading our Chrome JSON back (pt_jsonlines.c). pt_line_keys maps a call line's
 * function text - from "cat": to the name's closing quote, and the extra args
 * after "Python thread" - to its key and slice flags. pt_read_call_lines takes
 * the call lines of thread from text[*pos..len) (each ending ",\n", exactly as
 * pt_format_slices writes them, of a known function, its id the next of the
 * thread's and its parent an open call of it that encloses it) and stops at the
 * first other line, a line without its newline yet, when the batch is full or
 * when limit calls are taken; moves *pos past the lines taken and returns how
 * many. pt_line_thread_push takes one call (PT_ERR_ARG: its parent is not an
 * earlier call of the thread; PT_ERR_STATE: the parent is no open call or does
 * not enclose it). A thread reads in bounded memory: the calls enclosing the next
 * (a stack as deep as the calls nest) and, when slices is not NULL, the batch of
 * cap slices filled so far (count; the caller empties it). digest sums up every
 * call taken, so a second read can tell it met the same calls. */
typedef struct pt_line_keys pt_line_keys;
typedef struct pt_line_open pt_line_open;
typedef struct {
    pt_slice *slices;       /* the batch being filled (caller's), or NULL: keep none */
    uint64_t count;         /* in slices */
    uint64_t cap;
    uint64_t n;             /* calls taken: the thread index of the next one */
    uint64_t limit;         /* take at most this many calls */
    int64_t start_ns;       /* the trace's start: "ts" counts from it */
    uint64_t first_id;      /* "Python id" of the thread's first call */
    uint64_t tid;
    uint32_t thread_index;  /* "Python thread" */
    uint32_t max_depth;
    uint64_t pid;           /* of the last call taken */
    uint64_t digest;
    pt_line_open *open;     /* the enclosing calls, innermost last */
    uint64_t n_open;
    uint64_t open_cap;
} pt_line_thread;
pt_line_keys *pt_line_keys_new(void);
void pt_line_keys_free(pt_line_keys *keys);
int pt_line_keys_add(pt_line_keys *keys, const char *ident, uint32_t ident_len, const char *extra,
                     uint32_t extra_len, uint32_t key, uint32_t flags);
uint64_t pt_read_call_lines(const pt_line_keys *keys, pt_line_thread *thread, const char *text,
                            uint64_t len, uint64_t *pos);
int pt_line_thread_push(pt_line_thread *thread, int64_t start, int64_t end, uint32_t key,
                        uint32_t flags, int64_t parent);
/* A zeroed thread (limit: no limit), or NULL when out of memory; free with
 * pt_line_thread_free (its stack; the batch is the caller's). */
pt_line_thread *pt_line_thread_new(void);
void pt_line_thread_free(pt_line_thread *thread);
/* Reading back a .pftrace pytrace_cffi wrote (pt_pfread.c): one thread's
 * sequence at a time. pt_pf_read takes the Trace.packet entries of buffer from
 * *pos on while each is a SLICE_BEGIN (its TrackEvent bytes after the type
 * field known to keys: pt_line_keys_add with them as ident and no extra) or a
 * SLICE_END of the sequence, timestamped by the sequence's incremental clock
 * (now, in ns, moved by delta * unit_ns; clock_ready set), and nothing else; it
 * stops with *pos at the first other entry: PT_PF_PYTHON (whatever it is, or an
 * entry cut by the buffer's end: for Python to decode), PT_PF_FULL (slices mode:
 * the batch is full; empty out->slices and call again), PT_ERR_ARG (time goes
 * back, an end without a begin, calls nested 2^20 deep), PT_ERR_STATE (more calls than the scan
 * counted, or not as the durations pass found them), PT_ERR_NOMEM. Python feeds
 * what it decoded itself through pt_pf_begin and pt_pf_end (absolute ns). Modes:
 * PT_PF_SCAN counts (n, open_at_stop, max_depth, digest of every call as
 * pt_line_thread_push sums them) and keeps what the summary's counts need without
 * reading the calls again (open_at_start, first_start, last_root_end); with
 * `calls` (a limit) above 0, it keeps each call's duration too, as the durations
 * pass does, while the thread has at most that many calls (pt_pf_thread_kept
 * says whether it did: then it goes to pt_pf_thread_slices without a durations
 * pass); PT_PF_DURATIONS does too and keeps each call's
 * duration (4 bytes a call: room for `calls`, the scan's count); then
 * pt_pf_thread_slices turns it to PT_PF_SLICES, which pushes each call whole, in
 * start order, into out (its digest the scan's when the same calls were read). */
#define PT_PF_PYTHON 1
#define PT_PF_FULL 2
#define PT_PF_SCAN 0
#define PT_PF_DURATIONS 1
#define PT_PF_SLICES 2
typedef struct pt_pf_open pt_pf_open;
typedef struct pt_pf_long pt_pf_long;
typedef struct pt_pf_iid pt_pf_iid;
/* What each interned iid means, for the whole file (pt_pfnames.c): table 1 the
 * event categories, 2 the event names, 3 the debug annotation names (InternedData's
 * fields), each iid's name as its bytes. pt_pf_read takes a packet's interned
 * entries only when each says what names says, then marks them interned on the
 * thread (pt_pf_interned_add: Python marks those it decodes); it takes a begin of
 * known key bytes only when every iid they name is interned on the thread and
 * its track_ready is set. pt_pf_names_set: PT_ERR_ARG for another table. */
typedef struct pt_pf_names pt_pf_names;
pt_pf_names *pt_pf_names_new(void);
void pt_pf_names_free(pt_pf_names *names);
int pt_pf_names_set(pt_pf_names *names, uint32_t table, uint64_t iid, const char *name,
                    uint32_t len);
typedef struct {
    uint32_t sequence_id;   /* the thread's sequence: other packets go to Python */
    int mode;
    int clock_ready;        /* the sequence's clock is known (its snapshot read) */
    int64_t now;            /* the sequence clock, as CLOCK_MONOTONIC ns */
    uint64_t unit_ns;       /* of a timestamp delta */
    uint64_t n;             /* calls begun */
    uint64_t open_at_stop;
    uint32_t max_depth;
    uint32_t reserved;
    uint64_t digest;
    uint64_t open_at_start; /* scan: calls begun with PT_SLICE_SEEDED */
    int64_t first_start;    /* scan: the first call's start (0 with none) */
    int64_t last_root_end;  /* scan: the last call at depth 0's end (0 with none) */
    pt_pf_open *open;       /* the calls begun and not ended, innermost last */
    uint64_t n_open;
    uint64_t open_cap;
    uint32_t **durations;   /* per call, in chunks of 2^20 (durations and slices
                             * passes, a scan that keeps them) */
    uint64_t n_chunks;
    uint64_t chunks_cap;
    uint64_t durations_cap; /* calls the durations are for (the scan's count) */
    uint64_t keep_limit;    /* scan: keeps durations while at most this many calls */
    pt_pf_long *longs;      /* the calls of 2^32 - 1 ns or more */
    uint64_t n_long;
    uint64_t long_cap;
    uint64_t next_long;
    pt_line_thread *out;    /* slices pass */
    uint64_t *ended_open;   /* durations pass: the calls whose end says open at stop */
    uint64_t n_ended_open;
    uint64_t ended_open_cap;
    uint64_t next_ended_open;
    int track_ready;        /* the sequence's default track is its thread's (set by
                             * Python): else every event is Python's to check */
    pt_pf_iid *interned;    /* the (table, iid) pairs interned on the sequence since
                             * its state was cleared (pt_pfnames.c) */
    uint64_t interned_mask;
    uint64_t n_interned;
} pt_pf_thread;
pt_pf_thread *pt_pf_thread_new(uint32_t sequence_id, int mode, uint64_t calls);
void pt_pf_thread_free(pt_pf_thread *t);
int pt_pf_read(pt_pf_thread *t, const pt_pf_names *names, const pt_line_keys *keys,
               const char *buffer, uint64_t len, uint64_t *pos);
/* The thread's interned set: marks (table, iid) interned, asks whether it is, or
 * empties it (its sequence's state cleared). */
int pt_pf_interned_add(pt_pf_thread *t, uint32_t table, uint64_t iid);
int pt_pf_interned_has(const pt_pf_thread *t, uint32_t table, uint64_t iid);
void pt_pf_interned_clear(pt_pf_thread *t);
/* A packet's InternedData (data) taken when each entry is as our writer writes it
 * and says what names says: PT_OK, each marked interned on t; PT_PF_PYTHON
 * (nothing marked: for Python to decode) otherwise; PT_ERR_NOMEM. */
int pt_pf_take_interned(pt_pf_thread *t, const pt_pf_names *names, const char *data,
                        uint64_t len);
int pt_pf_begin(pt_pf_thread *t, int64_t ts, uint32_t key, uint32_t flags);
/* flags: PT_SLICE_OPEN_AT_STOP when the end says the call was open at stop (the
 * slices pass gives it to the call's slice at its begin). */
int pt_pf_end(pt_pf_thread *t, int64_t ts, uint32_t flags);
/* After a scan: whether it kept every call's duration (keep_limit), its last
 * chunk cut to size; 0 and none kept otherwise. */
int pt_pf_thread_kept(pt_pf_thread *t);
/* After a durations pass that read every call, a scan that kept them, or a slices
 * pass (whole or not: its durations are the same for another): the slices pass, from the
 * sequence's start again (PT_ERR_STATE otherwise). */
int pt_pf_thread_slices(pt_pf_thread *t, pt_line_thread *out);

#endif /* PT_READ_H */
