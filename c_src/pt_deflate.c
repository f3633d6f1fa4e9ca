/* pt_deflate.c - zlib-format deflate for the .pftrace writer's compressed_packets.
 *
 * A .pftrace is written as compressed_packets (TracePacket field 50): zlib
 * streams of at most 256 KiB of Trace.packet entries each. Python's zlib was the
 * writer's bottleneck (5-16 M events/s on two threads). libdeflate (vendored,
 * compression only, in libdeflate/) deflates a whole buffer at one go, faster
 * than zlib for about the same output: its level 1 at 1.6-3.2 times the speed
 * of zlib level 3 (which the writer used), its level 4 at 1.0-1.8 times for
 * 4-6% fewer bytes (docs/PERFORMANCE.md, "Compression"); and its output,
 * vendored, does not change with the system's zlib (a .pftrace's bytes are
 * pinned by the golden tests). A pt_deflater wraps one libdeflate compressor:
 * whole input in, whole zlib stream out, no streaming state.
 *
 * Nothing here touches Python: a deflater may be used on any thread, with or
 * without the GIL (cffi lets go of it around these calls; C code may call them
 * from a thread of its own). One deflater serves one thread at a time; distinct
 * deflaters run in parallel.
 */
#include "pt_export.h"

#include <stdlib.h>

#include "libdeflate/libdeflate.h"

struct pt_deflater {
    struct libdeflate_compressor *compressor;
    int level;
};

pt_deflater *
pt_deflater_new(int level)
{
    /* Refused rather than clamped: a level out of range is the caller's mistake,
     * and a silently different level would be measured and shipped unnoticed. */
    if (level < PT_DEFLATE_MIN_LEVEL || level > PT_DEFLATE_MAX_LEVEL)
        return NULL;
    pt_deflater *d = malloc(sizeof *d);
    if (d == NULL)
        return NULL;
    d->compressor = libdeflate_alloc_compressor(level);
    if (d->compressor == NULL) {
        free(d);
        return NULL;
    }
    d->level = level;
    return d;
}

void
pt_deflater_free(pt_deflater *d)
{
    if (d == NULL)
        return;
    libdeflate_free_compressor(d->compressor);
    free(d);
}

uint64_t
pt_deflate_bound(pt_deflater *d, uint64_t n)
{
    if (n > (uint64_t)SIZE_MAX / 2)
        return UINT64_MAX;
    /* libdeflate's bound for a NULL compressor holds for every level. */
    return libdeflate_zlib_compress_bound(d != NULL ? d->compressor : NULL, (size_t)n);
}

uint64_t
pt_deflate_zlib(pt_deflater *d, const void *in, uint64_t n, void *out, uint64_t cap)
{
    if (d == NULL || n > (uint64_t)SIZE_MAX / 2)
        return 0;
    if (cap > (uint64_t)SIZE_MAX)
        cap = SIZE_MAX;
    return libdeflate_zlib_compress(d->compressor, in, (size_t)n, out, (size_t)cap);
}
