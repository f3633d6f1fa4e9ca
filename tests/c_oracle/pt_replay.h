/* pt_replay.h - the tests' independent reference for the streaming walk
 * (c_src/pt_walk.c), compiled by tests/oracle_build.py into a test-only module
 * (never into the package): its declarations are that module's cdef.
 *
 * Replay pairs a thread's events into a slice table whole, then the slice
 * pipeline (tests/replay_reference.py) inserts torch regions
 * (pt_insert_regions), names tagged calls (pt_tagged_slices), drops short calls
 * (pt_drop_short_slices) and carriers (pt_drop_keys): the walk's table, made
 * another way. Times are ns0 + (ticks - tick0) * ns_per_tick; hidden as the
 * walk's. pt_event and pt_slice are the package's (c_src/pt_record.h, pt_read.h).
 */
/* One thread's events in order (a stopped tracer's chunks or a spill file's
 * blocks, joined), the first delta counting from base_ticks; calls still open
 * close at stop_ticks. */
int pt_replay_buffer(const pt_event *events, uint64_t n, int64_t base_ticks, int64_t stop_ticks,
                     const uint8_t *hidden, uint32_t n_hidden, int64_t tick0, int64_t ns0,
                     double ns_per_tick, pt_slice *out, uint64_t cap, uint64_t *n_out);
/* The events that open a slice (calls and seeds): the size replay's table needs. */
uint64_t pt_count_calls(const pt_event *events, uint64_t n);
/* torch's record_function regions made explicit. region_keys[tag] (tags below
 * n_tags) as the walk's region_key. Copies in[0..n) to out with a region slice before
 * each opening call: from its start to the closing call's end (or, unclosed,
 * the enclosing call's end), enclosing the opening call, the calls made between
 * and the closing call. cap: n + the number of regions; scratch: n + 2 * that
 * number of entries. Returns the count written (UINT64_MAX if cap is short);
 * with out NULL, only the number of regions. */
uint64_t pt_insert_regions(const pt_slice *in, uint64_t n, const uint32_t *region_keys,
                           uint32_t n_tags, pt_slice *out, uint64_t cap, int64_t *scratch);
/* Indices of the slices that carry a tag (up to cap); returns how many there are. */
uint64_t pt_tagged_slices(const pt_slice *slices, uint64_t n, uint64_t *out, uint64_t cap);
/* Removes slices shorter than min_ns (with their callees) in place, renumbering
 * parents; new_index is caller scratch of n entries. Returns how many remain. */
uint64_t pt_drop_short_slices(pt_slice *slices, uint64_t n, int64_t min_ns, int64_t *new_index);
/* Removes the slices whose key has drop[key] set (keys below n_drop), each alone:
 * its children go to its nearest kept ancestor. In place, renumbering parents
 * and depths; new_index is caller scratch of n entries. Returns how many remain. */
uint64_t pt_drop_keys(pt_slice *slices, uint64_t n, const uint8_t *drop, uint32_t n_drop,
                      int64_t *new_index);

