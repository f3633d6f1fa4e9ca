/* pt_export.h - exporting: the encoders of each output's bulk (Chrome JSON,
 * speedscope's events, .pftrace, the HTML page's reduction, the summary and the
 * table per distinct stack of the flame-graph outputs) and merge_torch's steps, fed
 * slices (the walk's batches, a loaded file's) or walk records; the deflate of
 * .pftrace's compressed packets. Part of the interface cffi sees (see
 * pt_record.h).
 */
#ifndef PT_EXPORT_H
#define PT_EXPORT_H

#include "pt_read.h"

/* Chrome JSON export: formats slices[*next..n) as complete events into out until it
 * is nearly full, advancing *next. Each event is prefix (",\n{...\"name\":"),
 * names[key] (already JSON-escaped), ts/dur in microseconds with three decimals
 * relative to base_ns, and args {"Python id", "Python parent id", "Python thread"}
 * followed by extras[key] (",\"k\":v" or ""), then "open at start": true for a
 * PT_SLICE_SEEDED slice. */
/* The same for slices numbered from index_base (a streaming walk's batch): the
 * slice at i has "Python id" first_id + index_base + i; parents are absolute. */
int pt_format_slices_from(const pt_slice *slices, uint64_t n, uint64_t *next,
                          const char *const *names, const uint32_t *name_lens,
                          const char *const *extras, const uint32_t *extra_lens, uint32_t n_keys,
                          const char *prefix, uint32_t prefix_len, int64_t base_ns,
                          uint64_t first_id, uint64_t index_base, uint32_t thread_index,
                          char *out, uint64_t cap, uint64_t *written);
int pt_format_slices(const pt_slice *slices, uint64_t n, uint64_t *next,
                     const char *const *names, const uint32_t *name_lens,
                     const char *const *extras, const uint32_t *extra_lens, uint32_t n_keys,
                     const char *prefix, uint32_t prefix_len, int64_t base_ns,
                     uint64_t first_id, uint32_t thread_index, char *out, uint64_t cap,
                     uint64_t *written);
/* speedscope's evented profile (pt_export.c): a thread's slices (start order,
 * parents numbered over the thread, first_index the batch's first) as JSON open
 * and close events {"type":"O"|"C","frame":F,"at":T} of their frames
 * (frame_of_key[key]), T in ns from base_ns, comma-separated, in time order (a
 * call is closed at its end before the next call outside it opens; never back
 * in time: a damaged trace's overlapping sibling opens at the earlier one's
 * end). pt_evented_format writes slices[*next..n) into out until it is nearly
 * full (at least 96 bytes: one event), advancing *next; PT_ERR_ARG for a key
 * out of range or a parent that is no open call, PT_ERR_NOMEM. After the
 * thread's last batch, pt_evented_close closes the calls still open (each at
 * its end: those open at stop end at stop) and returns how many are left for
 * another call (out was full). pt_evented_span: the events written and the
 * first's and last's T (0 without any). One evented per thread. */
typedef struct pt_evented pt_evented;
pt_evented *pt_evented_new(int64_t base_ns);
void pt_evented_free(pt_evented *e);
int pt_evented_format(pt_evented *e, const pt_slice *slices, uint64_t n, uint64_t first_index,
                      uint64_t *next, const uint32_t *frame_of_key, uint32_t n_keys,
                      char *out, uint64_t cap, uint64_t *written);
uint64_t pt_evented_close(pt_evented *e, char *out, uint64_t cap, uint64_t *written);
uint64_t pt_evented_span(const pt_evented *e, int64_t *first_at, int64_t *last_at);
/* Perfetto export (pt_perfetto.c): encodes a thread's slices as SLICE_BEGIN /
 * SLICE_END TrackEvent packets (each a Trace.packet entry) into out until it is
 * nearly full, resuming from *cursor (zeroed, last_ns = the sequence clock's
 * value, before the thread's first call). Timestamps are deltas from the previous
 * packet of the sequence. A begin carries key's bytes of events (TrackEvent
 * fields: name iid, category iids, debug annotations), marks[m] too for a slice
 * open at start (m = PT_PF_MARK_OPEN_AT_START: PT_SLICE_SEEDED), mark_lens[m]
 * bytes (debug annotations; entry 0 unused), and an end carries
 * marks[PT_PF_MARK_OPEN_AT_STOP] for a slice open at stop (PT_SLICE_OPEN_AT_STOP;
 * known only then to an encoder running during the trace), and a begin key's bytes of interned (InternedData fields) the
 * first time key is seen while interned_done[key] is 0. Key k's bytes are
 * blob[offsets[k]..offsets[k + 1]); both blobs end with PT_PF_BLOB_PADDING spare
 * bytes. A thread's slices may come in batches (first_index: the thread-wide
 * index of slices[0], which parents count in; cursor->next restarts at 0 for
 * each batch while the rest of the cursor carries on); the open slices' indices
 * and ends wait on stack and stack_end (stack_cap entries: the thread's deepest
 * depth + 1) and are ended after the last batch (last_batch). A batch is done
 * when cursor->next == n, the thread when also cursor->open == 0 after the last.
 * PT_ERR_ARG: slices out of time order, a key >= n_keys or too deep. */
#define PT_PF_BLOB_PADDING 16
#define PT_PF_MARK_OPEN_AT_STOP 1
#define PT_PF_MARK_OPEN_AT_START 2
typedef struct {
    uint64_t next;          /* the next slice to begin */
    uint32_t open;          /* slices begun and not yet ended, on the stack */
    int64_t last_ns;        /* timestamp of the sequence's previous packet */
} pt_pf_cursor;
int pt_pftrace_slices(const pt_slice *slices, uint64_t n, uint64_t first_index,
                      int last_batch, pt_pf_cursor *cursor, int64_t *stack,
                      int64_t *stack_end, uint32_t stack_cap,
                      const char *events, const uint32_t *event_offsets,
                      const char *interned, const uint32_t *interned_offsets,
                      uint8_t *interned_done, uint32_t n_keys,
                      const char *const *marks, const uint32_t *mark_lens,
                      uint32_t sequence_id, char *out, uint64_t cap, uint64_t *written);
/* .pftrace packets of walk records (see pt_pftrace_slices): encodes records[*next..n)
 * into out until it is nearly full, advancing *next and *last_ns. PT_ERR_ARG:
 * out of time order or a key >= n_keys. */
int pt_pftrace_records(const pt_walk_record *records, uint64_t n, uint64_t *next, int64_t *last_ns,
                       const char *events, const uint32_t *event_offsets,
                       const char *interned, const uint32_t *interned_offsets,
                       uint8_t *interned_done, uint32_t n_keys,
                       const char *const *marks, const uint32_t *mark_lens,
                       uint32_t sequence_id, char *out, uint64_t cap, uint64_t *written);
/* HTML reduction (pt_reduce.c): the slices kept when they last at least min_ns or
 * sit above depth top_levels, and their parent is kept. Writes the first cap kept
 * indices to kept and their self time over all slices (duration less every direct
 * callee's) to self_ns; cap 0 only counts. Returns how many are kept, -1 when out
 * of memory. */
int64_t pt_reduce_slices(const pt_slice *slices, uint64_t n, int64_t min_ns, uint32_t top_levels,
                         uint64_t *kept, int64_t *self_ns, uint64_t cap);
/* The same rule streamed: a thread's slices fed in batches (start order, parents
 * numbered over the thread; first_index numbers the batch's first). A reducer made
 * with pt_reducer_new(base, levels) counts (pt_reducer_count): per top_levels t in
 * 0..levels, buckets[t * PT_REDUCE_BUCKETS + b] counts the calls whose path
 * minimum (the shortest duration among it and its ancestors at depth >= t) falls
 * in bucket b: 0 under base, 1 + k in [base << k, base << (k + 1)) (the last
 * finite bucket open above), PT_REDUCE_BUCKETS - 1 kept at any threshold; so the
 * calls kept at min_ns = base << k are those of buckets 1 + k and up. Made with
 * pt_reducer_new(min_ns, top_levels) it keeps (pt_reducer_keep) the calls
 * pt_reduce_slices keeps, with the same self times. pt_reducer_end_thread after a
 * thread's last batch; then pt_reducer_take hands out its kept calls (valid until
 * the next feed). PT_ERR_NOMEM; PT_ERR_ARG: a parent that is no open call. */
#define PT_REDUCE_BUCKETS 66
typedef struct {
    int64_t start;
    int64_t end;
    uint64_t index;         /* in the thread's slices */
    int64_t self_ns;        /* duration less every direct callee's, kept or not */
    uint32_t key;
    uint32_t depth;
} pt_reduced;
typedef struct pt_reducer pt_reducer;
pt_reducer *pt_reducer_new(int64_t min_ns, uint32_t top_levels);
void pt_reducer_free(pt_reducer *r);
int pt_reducer_count(pt_reducer *r, const pt_slice *slices, uint64_t n, uint64_t first_index,
                     uint64_t *buckets);
int pt_reducer_keep(pt_reducer *r, const pt_slice *slices, uint64_t n, uint64_t first_index);
void pt_reducer_end_thread(pt_reducer *r);
uint64_t pt_reducer_take(pt_reducer *r, const pt_reduced **kept);
/* The page's numbers of a thread's kept calls (pt_reduce.c): per call taken, its
 * start after the previous taken call's (the first's after start_ns), duration,
 * key, depth, the calls left out since the previous taken one and self_ns, in
 * decimal, all joined by ",". With filter, only the calls a reduction of min_ns
 * and top_levels keeps of kept (a superset holding each one's parent: the
 * survey's, at its first candidate): at a depth under top_levels, or lasting
 * min_ns or more under a parent taken. pt_reduced_text_write writes from
 * kept[*next] on at out + *written while PT_REDUCED_TEXT_MAX bytes are left of
 * cap, moving both; call again with the same text for the rest. PT_ERR_ARG: a
 * call whose parent is not in kept; PT_ERR_NOMEM. */
#define PT_REDUCED_TEXT_MAX 128
typedef struct pt_reduced_text pt_reduced_text;
pt_reduced_text *pt_reduced_text_new(int64_t start_ns, int filter, int64_t min_ns,
                                     uint32_t top_levels);
void pt_reduced_text_free(pt_reduced_text *text);
int pt_reduced_text_write(pt_reduced_text *text, const pt_reduced *kept, uint64_t count,
                          uint64_t *next, char *out, uint64_t cap, uint64_t *written);
/* How many calls it has written so far. */
uint64_t pt_reduced_text_taken(const pt_reduced_text *text);
/* Summary (pt_summary.c): adds one thread's slices to per-name calls, total_ns
 * (recursion counted once) and self_ns (less direct callees), n_names entries
 * each; name_of_key maps each of n_keys keys to its name. times_open is scratch
 * of n_names zeros, left zeroed. PT_ERR_ARG: a key or name out of range. */
int pt_summarize_slices(const pt_slice *slices, uint64_t n, const uint32_t *name_of_key,
                        uint32_t n_keys, uint32_t n_names, uint64_t *calls, int64_t *total_ns,
                        int64_t *self_ns, uint32_t *times_open);
/* The same streamed: a summarizer (name_of_key copied) takes a thread's slices
 * in batches (start order, parents numbered over the thread, first_index the
 * batch's first), adding to the tables given; pt_summarizer_end_thread after each
 * thread's last batch. NULL / PT_ERR_NOMEM when out of memory; PT_ERR_ARG: a key
 * or name out of range, or a parent that is no open call. */
typedef struct pt_summarizer pt_summarizer;
pt_summarizer *pt_summarizer_new(const uint32_t *name_of_key, uint32_t n_keys, uint32_t n_names);
void pt_summarizer_free(pt_summarizer *s);
int pt_summarizer_feed(pt_summarizer *s, const pt_slice *slices, uint64_t n, uint64_t first_index,
                       uint64_t *calls, int64_t *total_ns, int64_t *self_ns);
void pt_summarizer_end_thread(pt_summarizer *s);
/* Per distinct stack (pt_summary.c), for collapsed stacks and pprof: a tree of
 * nodes, one per (parent node, frame), each with the calls whose innermost frame
 * it is (less frames open at start, as the summary counts) and their self time
 * (less direct callees). frame_of_key (copied) maps each of n_keys keys to its
 * frame. pt_stacks_node finds or makes the node of frame under parent
 * (PT_NO_NODE: a root), PT_NO_NODE when out of memory: the caller makes each
 * thread's root so (its thread's frame, under its process's for a job), then
 * pt_stacks_begin_thread(root), the thread's slices in batches as for the
 * summarizer (pt_stacks_feed), pt_stacks_end_thread. A node is made after its
 * parent; pt_stacks_nodes hands out all of them (valid until the next feed).
 * PT_ERR_ARG: a key out of range, a parent that is no open call, a root that is
 * no node; PT_ERR_STATE: fed outside a thread. */
#define PT_NO_NODE 0xFFFFFFFFu
typedef struct {
    uint32_t parent;        /* PT_NO_NODE for a root */
    uint32_t frame_id;
    uint64_t calls;
    int64_t self_ns;
} pt_stack_node;
typedef struct pt_stacks pt_stacks;
pt_stacks *pt_stacks_new(const uint32_t *frame_of_key, uint32_t n_keys);
void pt_stacks_free(pt_stacks *s);
uint32_t pt_stacks_node(pt_stacks *s, uint32_t parent, uint32_t frame);
int pt_stacks_begin_thread(pt_stacks *s, uint32_t root);
int pt_stacks_feed(pt_stacks *s, const pt_slice *slices, uint64_t n, uint64_t first_index);
void pt_stacks_end_thread(pt_stacks *s);
uint64_t pt_stacks_nodes(const pt_stacks *s, const pt_stack_node **nodes);
/* The self time of pt_summarizer_feed inside windows only: window w is
 * [bounds[2w], bounds[2w + 1]), sorted and disjoint; each call's time and its
 * direct callees' are clipped to each window they overlap and added to the
 * n_names entries of self_ns from groups[w] * n_names (groups[w] < the groups
 * self_ns holds). Calls and total time are not counted. */
int pt_summarizer_feed_windows(pt_summarizer *s, const pt_slice *slices, uint64_t n,
                               uint64_t first_index, const int64_t *bounds,
                               const uint32_t *groups, uint32_t n_windows, int64_t *self_ns);
/* The nodes in preorder, for the HTML page's flame graph: the roots, then below
 * each node its children by total time (its self time summed over its subtree),
 * most first, ties by frame. Per position (n_nodes of each): order (the node),
 * depth (0 for a root), span (how many positions its subtree takes after it) and
 * total; per node, position (where it is in order). PT_ERR_NOMEM. */
int pt_stacks_preorder(const pt_stacks *s, uint32_t *order, uint32_t *depth, uint32_t *span,
                       int64_t *total, uint32_t *position);
/* merge_torch: moves slice times (in place) from CLOCK_MONOTONIC ns onto
 * CLOCK_REALTIME ns as _clock.monotonic_to_realtime does, from the clocks' offsets
 * off0 at mono0 (start) and off1 at mono1 (stop): linear in between, held outside.
 * *first_start and *last_end get the earliest start and the latest end
 * (INT64_MAX and INT64_MIN when n is 0). */
void pt_slices_to_realtime(pt_slice *slices, uint64_t n, int64_t mono0, int64_t off0,
                           int64_t mono1, int64_t off1, int64_t *first_start,
                           int64_t *last_end);
/* merge_torch (pt_merge.c): per thread, torch's regions (n, in any order: start,
 * end, a name id > 0) filter our slices as they stream by, in start order, parents
 * first and absolute over the thread (first_index: the batch's first). Left out:
 * a slice crossing a region's edge, and one whose key has a name id
 * (region_name_of_key, 0: none) that a region of that name lies within (torch's
 * region replaces ours). The rest are moved up in place, numbered over the kept
 * slices and re-parented to their nearest kept ancestor. Returns how many of the
 * batch are kept (UINT64_MAX when out of memory). counts: slices left out so far.
 * on_monotonic: the slices to filter stay on CLOCK_MONOTONIC (the .pftrace merge
 * writes them so) and are compared on the regions' CLOCK_REALTIME as
 * pt_slices_to_realtime would move them (the same arguments): the same ones
 * are kept as in the JSON merge, which moves them first. An edge named
 * PT_EDGE_OP is one of torch's ops: a slice crossing it is left out too, counted
 * apart (crossing_ops); none lies "within" for a name. */
#define PT_EDGE_OP 0xFFFFFFFFu
typedef struct pt_region_edges pt_region_edges;
pt_region_edges *pt_region_edges_new(const int64_t *starts, const int64_t *ends,
                                     const uint32_t *names, uint64_t n);
void pt_region_edges_on_monotonic(pt_region_edges *edges, int64_t mono0, int64_t off0,
                                  int64_t mono1, int64_t off1);
void pt_region_edges_free(pt_region_edges *edges);
uint64_t pt_region_edges_filter(pt_region_edges *edges, pt_slice *slices, uint64_t n,
                                uint64_t first_index, const uint32_t *region_name_of_key,
                                uint32_t n_keys);
void pt_region_edges_counts(const pt_region_edges *edges, uint64_t *replaced,
                            uint64_t *crossing, uint64_t *crossing_ops);

/* zlib-format deflate (pt_deflate.c, libdeflate): the .pftrace writer's
 * compressed_packets. pt_deflater_new(level): a deflater of level
 * PT_DEFLATE_MIN_LEVEL..PT_DEFLATE_MAX_LEVEL (libdeflate's: 0 stores, 1 is the
 * fastest, 6 zlib's default, 10-12 slow and thorough); NULL for a level out of
 * that range (refused, never clamped) or when out of memory. pt_deflate_zlib
 * compresses in[0..n) whole into one zlib stream (header, deflate, adler32) in
 * out[0..cap) and returns its size, or 0 when it did not fit in cap (out is
 * then unspecified) or d is NULL. pt_deflate_bound: a cap always enough for n
 * bytes (d NULL: for any level), UINT64_MAX when n is too big to compress at
 * all. No Python API: callable on any thread without the GIL; one deflater is
 * used by one thread at a time. */
#define PT_DEFLATE_MIN_LEVEL 0
#define PT_DEFLATE_MAX_LEVEL 12
typedef struct pt_deflater pt_deflater;
pt_deflater *pt_deflater_new(int level);
void pt_deflater_free(pt_deflater *d);
uint64_t pt_deflate_bound(pt_deflater *d, uint64_t n);
uint64_t pt_deflate_zlib(pt_deflater *d, const void *in, uint64_t n, void *out, uint64_t cap);

/* The .pftrace encoded during the run (pt_live.c): a thread that follows a
 * spill file (events.bin) as it grows and writes each traced thread's packets to
 * part_prefix + its index (sequence pt_live_sequence(first_sequence, index),
 * clock starting at ns0; deflated
 * into compressed_packets packets at level, or plain with level -1). mark_stop
 * and mark_start: the debug annotations of a call open at stop (on its end) and
 * at start (on its begin). pt_live_new: NULL when out of memory or the spill
 * file cannot be opened. pt_live_add_keys: the next n keys' TrackEvent bytes,
 * InternedData bytes (key i's at offsets[i]..offsets[i + 1], n + 1 offsets, as
 * pt_pftrace_records reads its blobs) and hiding, before any block that uses
 * them is committed.
 * pt_live_advance: the spill file's length in whole blocks. pt_live_finish:
 * the last length and the stop, then waits for the encoder; *out says whether
 * the parts are the whole trace (complete), or why not. pt_live_free stops it. */
#define PT_ERR_LIVE_IO -20       /* a read of the spill file or a part's write failed */
#define PT_ERR_LIVE_THREADS -21  /* a thread past PT_LIVE_MAX_THREADS: no sequence left */
/* Thread index's packet sequence: first_sequence + index for a process's first
 * PT_LIVE_RANGE threads (first_sequence = 2 + (pid & 0x3FFFFF) * PT_LIVE_RANGE:
 * one range per pid, below 2^31 + 2), then the upper half of the uint32 ids
 * from the process's own place in it on (wrapping within it), so that the ids of
 * up to PT_LIVE_MAX_THREADS threads are distinct; two processes of a job may
 * meet there (a join checks). */
#define PT_LIVE_RANGE 512
#define PT_LIVE_MAX_THREADS 2147484158u     /* PT_LIVE_RANGE + 2^31 - 2 */
uint32_t pt_live_sequence(uint32_t first_sequence, uint32_t index);
typedef struct pt_live pt_live;
typedef struct {
    int status;             /* PT_OK, or why the encoder stopped */
    int stale;              /* it met a tag or args: only the whole trace tells */
    int error_number;       /* errno of a failed read or write */
    int complete;           /* every committed block encoded, every part written */
    uint32_t n_threads;     /* threads seen (their parts: part_prefix + index) */
    uint32_t n_keys;
    uint64_t events;
} pt_live_result;
pt_live *pt_live_new(const char *spill_path, const char *part_prefix,
                     uint32_t first_sequence, int level,
                     int64_t tick0, int64_t ns0, double ns_per_tick, int64_t min_ns,
                     const char *mark_stop, uint32_t stop_len, const char *mark_start,
                     uint32_t start_len);
int pt_live_add_keys(pt_live *e, const char *events, const uint32_t *event_offsets,
                     const char *interned, const uint32_t *interned_offsets,
                     const uint8_t *hidden, uint32_t n);
int pt_live_start(pt_live *e);
void pt_live_advance(pt_live *e, uint64_t committed);
/* Bytes of events.bin up to committed (its length in whole blocks) not yet
 * encoded: what pt_live_finish will wait for, said on the console when long. */
uint64_t pt_live_backlog(pt_live *e, uint64_t committed);
int pt_live_finish(pt_live *e, uint64_t committed, int64_t stop_ticks, pt_live_result *out);
void pt_live_free(pt_live *e);

#endif /* PT_EXPORT_H */
