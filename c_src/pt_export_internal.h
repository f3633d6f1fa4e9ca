/* pt_export_internal.h - what the export units share (the walk, the encoders
 * of each output, merge_torch's steps, the live encoder, the readers of saved
 * files and their checks: pt_walk.c, pt_export.c, pt_perfetto.c, pt_reduce.c,
 * pt_summary.c, pt_merge.c, pt_live.c, pt_jsonlines.c, pt_pfread.c, pt_pfnames.c,
 * pt_tables.c). Apart from pt_record_internal.h so that these units, which
 * read events and slices and write bytes, compile without the tracer's
 * structures or Python, and a change to either side's internals is seen to
 * touch that side only.
 */
#ifndef PT_EXPORT_INTERNAL_H
#define PT_EXPORT_INTERNAL_H

#include "pt_internal.h"

/* Makes room for need items of size bytes in *items (*cap of them so far),
 * doubling from 64: the growable arrays of the walk and the live encoder. */
static inline int
pt_grow(void **items, uint64_t *cap, uint64_t need, size_t size)
{
    if (need <= *cap)
        return PT_OK;
    uint64_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *grown = realloc(*items, cap2 * size);
    if (!grown)
        return PT_ERR_NOMEM;
    *items = grown;
    *cap = cap2;
    return PT_OK;
}

/* pt_export.c: one CLOCK_MONOTONIC ns onto CLOCK_REALTIME (see pt_slices_to_realtime). */
int64_t pt_one_to_realtime(int64_t ns, int64_t mono0, int64_t off0, int64_t mono1, int64_t off1);

/* pt_jsonlines.c: the key and flags of text (ident text, no extra) in keys; 0 if unknown. */
int pt_line_keys_lookup(const pt_line_keys *keys, const char *text, uint32_t len, uint32_t *key,
                        uint32_t *flags);

/* A protobuf varint at *p before end (at most ten bytes), *p moved past it; 0 if
 * cut or too long (pt_pfread.c, pt_pfnames.c). */
static inline int
pt_pf_varint(const unsigned char **p, const unsigned char *end, uint64_t *value)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        unsigned char byte = *(*p)++;
        if (shift == 63 && byte > 1)
            return 0;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *value = v;
            return 1;
        }
    }
    return 0;
}

/* Whether every iid a begin's TrackEvent bytes (after its type) name is interned
 * on t, and they name no track of their own (else the begin is Python's). */
int pt_pf_begin_interned(const pt_pf_thread *t, const unsigned char *p, uint64_t len);
void pt_pf_interned_free(pt_pf_thread *t);

/* A 64-bit finalizer (MurmurHash3's): every input bit moves every output bit. */
static inline uint64_t
pt_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* One call's share of a thread's digest (pt_line_thread.digest): its fields and
 * place mixed, to be summed, so another call anywhere changes the sum. */
static inline uint64_t
pt_call_digest(int64_t start, int64_t end, uint32_t key, uint32_t flags, int64_t parent,
               uint64_t index)
{
    return pt_mix((uint64_t)start ^ pt_mix((uint64_t)end ^ pt_mix(
        ((uint64_t)key << 32 | flags) ^ pt_mix((uint64_t)parent ^ pt_mix(index)))));
}

#endif /* PT_EXPORT_INTERNAL_H */
