/* pt_flight_files.c - what a flight recorder's dump clone writes of the ring
 * (pt_flight.c makes the clone): stacks.tsv, the names its keys need, and
 * events.bin, compressed.
 *
 * Sized for jobs of 1,000 processes (issue #30): a dump of a 64 MiB ring was
 * 64 MiB of events.bin plus every name the process ever saw. Now
 *  - stacks.tsv: each thread's calls open at the dump (the ring walked here, in
 *    the clone: the program pays nothing), with the clock ticks each began, and
 *    stack_sources.tsv the names of their keys (key_sources.tsv's lines), so
 *    that `report` reads a few KiB per process, never the ring;
 *  - events.bin compressed (libdeflate, level 1) in pieces of at most
 *    PT_FLIGHT_PIECE bytes: "PTEVTZ01", then per piece its size, its deflated
 *    size and its zlib stream; the inflated pieces are the spill format's
 *    events.bin exactly (flight/packed.py reads it);
 *  - key_sources.tsv and keys.jsonl only with the keys the written events name
 *    (keys.jsonl's lines hold PT_FLIGHT_KEYS_PER_LINE keys at most, the
 *    recorder's journal writes them so: a line is kept when a key of it is named,
 *    or it is the first (the clock's start) or it names tags);
 *  - with a window (dump format "stacks": pt_flight_set_dump_options), only the
 *    ring's events of the window's last ticks (each thread's from its first
 *    event in the window on; the calls open before it are in stacks.tsv).
 * The clone calls no malloc and takes no lock: the deflater and its buffers are
 * made before (pt_flight_set_dump_options), a key bitmap and keys.jsonl's copy
 * are mmap'ed (anonymous). When any of
 * that is missing, the dump is written as before (uncompressed, whole names).
 */
#define _GNU_SOURCE
#include "pt_record_internal.h"
#include "pt_flight_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PT_FLIGHT_PIECE (1u << 20)      /* raw bytes per compressed piece */
#define PT_FLIGHT_DEPTH (1u << 20)      /* open calls followed per thread (the outermost) */
#define PT_FLIGHT_STACK_ENDS 512        /* written of a deeper stack: its two ends */
#define PT_FLIGHT_OPEN_KEYS 16384       /* distinct keys named in stack_sources.tsv */

static pt_deflater *pt_deflater_of_dumps;
static unsigned char *pt_piece_in, *pt_piece_out;
static uint64_t pt_piece_out_cap;
static int pt_compress_dumps;
static int64_t pt_window_ticks;         /* 0: the whole ring */

int
pt_flight_set_dump_options(int compress, int64_t window_ticks)
{
    pt_window_ticks = window_ticks > 0 ? window_ticks : 0;
    pt_compress_dumps = 0;
    if (!compress)
        return PT_OK;
    if (!pt_deflater_of_dumps) {            /* once per process: the clones share it */
        pt_deflater *d = pt_deflater_new(1);
        uint64_t cap = pt_deflate_bound(d, PT_FLIGHT_PIECE);
        unsigned char *in = malloc(PT_FLIGHT_PIECE), *out = cap != UINT64_MAX ? malloc(cap) : NULL;
        if (!d || !in || !out) {
            pt_deflater_free(d);
            free(in);
            free(out);
            return PT_ERR_NOMEM;
        }
        pt_deflater_of_dumps = d;
        pt_piece_in = in;
        pt_piece_out = out;
        pt_piece_out_cap = cap;
    }
    pt_compress_dumps = 1;
    return PT_OK;
}

/* ------------------------------------------------------------------------ */
/* Syscall-only writing                                                     */
/* ------------------------------------------------------------------------ */

int
pt_flight_put(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

int
pt_flight_put_number(int fd, int64_t value)
{
    char buf[24];
    uint64_t v = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    char *p = buf + sizeof buf;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (value < 0)
        *--p = '-';
    return pt_flight_put(fd, p, (size_t)(buf + sizeof buf - p));
}

static int
pt_open_in(const char *dir, const char *name, char *path)
{
    size_t a = strlen(dir), b = strlen(name);
    if (a + b + 2 > PT_FLIGHT_FILES_PATH)
        return -1;
    memcpy(path, dir, a);
    path[a] = '/';
    memcpy(path + a + 1, name, b + 1);
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

/* ------------------------------------------------------------------------ */
/* The ring's chunks                                                        */
/* ------------------------------------------------------------------------ */

/* The events of chunk c of thread t that the clone holds (0 when none). */
static uint64_t
pt_chunk_events(const pt_thread *t, const pt_chunk *c)
{
    uint64_t n = c->used;
    if (c == t->tail) {
        if (t->cursor < c->events || t->cursor > c->events + c->capacity)
            return 0;
        n = (uint64_t)(t->cursor - c->events);
    }
    return n <= c->capacity ? n : 0;
}

/* The first of chunk c's n events within the window (n: none), and the clock
 * before it into *base. */
static uint64_t
pt_window_start(const pt_chunk *c, uint64_t n, int64_t cutoff, int64_t *base)
{
    int64_t ticks = c->base_ticks;
    *base = ticks;
    if (!pt_window_ticks)
        return 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t delta = pt_event_ticks(&c->events[i]);
        if (ticks + (int64_t)delta >= cutoff) {
            *base = ticks;
            return i;
        }
        ticks += (int64_t)delta;
    }
    return n;
}

#define PT_EACH_CHUNK(t, c) \
    for (pt_chunk *c = (t)->head; c; c = c == (t)->tail ? NULL : c->next)

/* ------------------------------------------------------------------------ */
/* stacks.tsv: the calls open at the dump                                   */
/* ------------------------------------------------------------------------ */

/* The open calls of the thread being walked: mmap'ed in the clone (no malloc
 * there) for PT_FLIGHT_DEPTH, touched only as deep as a stack goes; without it,
 * the static array (its outermost calls only). */
typedef struct { uint32_t key_kind; int64_t ticks; } pt_open_call;
static pt_open_call pt_open_static[2 * PT_FLIGHT_STACK_ENDS];
static pt_open_call *pt_open = pt_open_static;
static uint64_t pt_open_cap = 2 * PT_FLIGHT_STACK_ENDS;
static uint32_t pt_open_keys[PT_FLIGHT_OPEN_KEYS];
static uint32_t pt_n_open_keys;

static void
pt_open_reserve(void)
{
    if (pt_open != pt_open_static)
        return;
    void *mapped = mmap(NULL, (size_t)PT_FLIGHT_DEPTH * sizeof(pt_open_call),
                        PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                        -1, 0);
    if (mapped != MAP_FAILED) {
        pt_open = mapped;
        pt_open_cap = PT_FLIGHT_DEPTH;
    }
}

/* Thread t's calls open at the end of its ring (until_ticks, not 0: at that
 * instant, the dump's frames': a thread's events are in time order) into pt_open
 * (the outermost pt_open_cap); returns how many are open in all. A return ends the
 * innermost open call of its key and kind, and those inside it (as the walk
 * does: pt_walk.c); a return whose call the ring lost ends nothing. */
static uint64_t
pt_open_calls(const pt_thread *t, int64_t until_ticks)
{
    uint64_t depth = 0;
    PT_EACH_CHUNK(t, c) {
        uint64_t n = pt_chunk_events(t, c);
        int64_t ticks = c->base_ticks;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t kk = c->events[i].key_kind, kind = kk & PT_KIND_MASK;
            ticks += (int64_t)pt_event_ticks(&c->events[i]);
            if (until_ticks && ticks > until_ticks)
                return depth;
            if (kind == PT_EV_PY_CALL || kind == PT_EV_C_CALL || kind == PT_EV_PY_SEED) {
                if (depth < pt_open_cap) {
                    pt_open[depth].key_kind = kk;
                    pt_open[depth].ticks = ticks;
                }
                depth++;
            } else if (kind == PT_EV_PY_RETURN || kind == PT_EV_C_RETURN) {
                if (depth > pt_open_cap) {          /* (an inner one not kept) */
                    depth--;
                    continue;
                }
                uint32_t key = kk >> PT_KEY_SHIFT;
                int is_c = kind == PT_EV_C_RETURN;
                for (uint64_t q = depth; q > 0; q--) {
                    uint32_t open = pt_open[q - 1].key_kind;
                    if (open >> PT_KEY_SHIFT == key &&
                        ((open & PT_KIND_MASK) == PT_EV_C_CALL) == is_c) {
                        depth = q - 1;
                        break;
                    }
                }
            }
        }
    }
    return depth;
}

static void
pt_note_open_key(uint32_t key)
{
    for (uint32_t i = 0; i < pt_n_open_keys; i++)
        if (pt_open_keys[i] == key)
            return;
    if (pt_n_open_keys < PT_FLIGHT_OPEN_KEYS)
        pt_open_keys[pt_n_open_keys++] = key;
}

/* stacks.tsv: "clock<TAB>start ticks<TAB>start ns", then per open call
 * "open<TAB>thread index<TAB>depth<TAB>p|c|s<TAB>key<TAB>ticks", outermost first
 * (s: a Python call running when recording began, its ticks the trace's start).
 * A stack deeper than 2 * PT_FLIGHT_STACK_ENDS has its outermost and innermost
 * PT_FLIGHT_STACK_ENDS written, and between them "deeper<TAB>thread
 * index<TAB>n<TAB>ticks": n calls open there, not written, the outermost of them
 * begun at ticks. "deeper<TAB>thread index<TAB>n" last: n more open inside than
 * could be followed (their calls unknown). "end" last. */
static int
pt_write_stacks(pt_tracer *tracer, const char *dir, int64_t until_ticks)
{
    char path[PT_FLIGHT_FILES_PATH];
    int fd = pt_open_in(dir, "stacks.tsv", path);
    if (fd < 0)
        return 0;
    pt_n_open_keys = 0;
    int ok = pt_flight_put(fd, "clock\t", 6) && pt_flight_put_number(fd, tracer->start_ticks) &&
             pt_flight_put(fd, "\t", 1) && pt_flight_put_number(fd, tracer->start_ns) && pt_flight_put(fd, "\n", 1);
    pt_open_reserve();
    for (pt_thread *t = tracer->threads; ok && t; t = t->next) {
        uint64_t depth = pt_open_calls(t, until_ticks);
        uint64_t kept = depth < pt_open_cap ? depth : pt_open_cap;
        uint64_t cut_from = kept, cut_to = kept;        /* [cut_from, cut_to) not written */
        if (kept > 2 * PT_FLIGHT_STACK_ENDS) {
            cut_from = PT_FLIGHT_STACK_ENDS;
            cut_to = kept - PT_FLIGHT_STACK_ENDS;
        }
        for (uint64_t d = 0; ok && d < kept; d++) {
            if (d == cut_from && cut_to > cut_from) {
                ok = pt_flight_put(fd, "deeper\t", 7) && pt_flight_put_number(fd, t->index) &&
                     pt_flight_put(fd, "\t", 1) &&
                     pt_flight_put_number(fd, (int64_t)(cut_to - cut_from)) &&
                     pt_flight_put(fd, "\t", 1) && pt_flight_put_number(fd, pt_open[d].ticks) &&
                     pt_flight_put(fd, "\n", 1);
                d = cut_to;
            }
            uint32_t kk = pt_open[d].key_kind;
            pt_note_open_key(kk >> PT_KEY_SHIFT);
            ok = pt_flight_put(fd, "open\t", 5) && pt_flight_put_number(fd, t->index) &&
                 pt_flight_put(fd, "\t", 1) && pt_flight_put_number(fd, (int64_t)d) &&
                 pt_flight_put(fd, (kk & PT_KIND_MASK) == PT_EV_C_CALL ? "\tc\t"
                            : (kk & PT_KIND_MASK) == PT_EV_PY_SEED ? "\ts\t" : "\tp\t", 3) &&
                 pt_flight_put_number(fd, kk >> PT_KEY_SHIFT) && pt_flight_put(fd, "\t", 1) &&
                 pt_flight_put_number(fd, pt_open[d].ticks) && pt_flight_put(fd, "\n", 1);
        }
        if (ok && depth > kept)
            ok = pt_flight_put(fd, "deeper\t", 7) && pt_flight_put_number(fd, t->index) &&
                 pt_flight_put(fd, "\t", 1) && pt_flight_put_number(fd, (int64_t)(depth - kept)) &&
                 pt_flight_put(fd, "\n", 1);
    }
    ok = ok && pt_flight_put(fd, "end\n", 4);       /* (a file cut short lacks it) */
    return close(fd) == 0 && ok;
}

/* ------------------------------------------------------------------------ */
/* Names: only those of the keys written                                    */
/* ------------------------------------------------------------------------ */

static unsigned char *pt_named;         /* a bit per key the written events name */
static size_t pt_named_bytes;

static int
pt_is_named(uint64_t key)
{
    return !pt_named || (key / 8 < pt_named_bytes && pt_named[key / 8] >> (key % 8) & 1);
}

/* pt_named: the keys the events written (those in the window) name, plus the
 * open ones; NULL (every key counts) when no room could be mapped. */
static void
pt_mark_named(pt_tracer *tracer, int64_t cutoff)
{
    pt_named_bytes = (size_t)tracer->n_keys / 8 + 1;
    void *map = mmap(NULL, pt_named_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    pt_named = map == MAP_FAILED ? NULL : map;
    if (!pt_named)
        return;
    for (pt_thread *t = tracer->threads; t; t = t->next)
        PT_EACH_CHUNK(t, c) {
            uint64_t n = pt_chunk_events(t, c);
            int64_t base;
            for (uint64_t i = pt_window_start(c, n, cutoff, &base); i < n; i++) {
                uint32_t kk = c->events[i].key_kind, kind = kk & PT_KIND_MASK;
                uint64_t key = kk >> PT_KEY_SHIFT;
                if (kind <= PT_EV_PY_SEED && key / 8 < pt_named_bytes)
                    pt_named[key / 8] |= (unsigned char)(1u << (key % 8));
            }
        }
    for (uint32_t i = 0; i < pt_n_open_keys; i++)
        if (pt_open_keys[i] / 8 < pt_named_bytes)
            pt_named[pt_open_keys[i] / 8] |= (unsigned char)(1u << (pt_open_keys[i] % 8));
}

static int
pt_is_open_key(uint64_t key)
{
    for (uint32_t i = 0; i < pt_n_open_keys; i++)
        if (pt_open_keys[i] == key)
            return 1;
    return 0;
}

/* The leading decimal of text[0..n) (UINT64_MAX when none). */
static uint64_t
pt_leading_number(const char *text, size_t n)
{
    uint64_t v = 0;
    size_t i = 0;
    while (i < n && i < 12 && text[i] >= '0' && text[i] <= '9')
        v = v * 10 + (uint64_t)(text[i++] - '0');
    return i ? v : UINT64_MAX;
}

/* key_sources.tsv (the lines of the named keys) and stack_sources.tsv (those
 * of the open calls' keys): "id<TAB>..." lines of pt_note_source's text. */
static int
pt_write_sources_of(pt_tracer *tracer, const char *dir)
{
    if (!tracer->note_sources || !tracer->source_text)
        return 1;
    char path[PT_FLIGHT_FILES_PATH];
    int all = pt_open_in(dir, "key_sources.tsv", path);
    int open_fd = pt_open_in(dir, "stack_sources.tsv", path);
    int ok = all >= 0 && open_fd >= 0;
    const char *text = tracer->source_text;
    size_t n = tracer->source_len <= tracer->source_cap ? tracer->source_len : 0;
    for (size_t at = 0; ok && at < n;) {
        const char *end = memchr(text + at, '\n', n - at);
        size_t len = end ? (size_t)(end - (text + at)) + 1 : n - at;
        uint64_t key = pt_leading_number(text + at, len);
        if (key != UINT64_MAX && pt_is_named(key))
            ok = pt_flight_put(all, text + at, len);
        if (ok && key != UINT64_MAX && pt_is_open_key(key))
            ok = pt_flight_put(open_fd, text + at, len);
        at += len;
    }
    if (all >= 0 && close(all) != 0)
        ok = 0;
    if (open_fd >= 0 && close(open_fd) != 0)
        ok = 0;
    return ok;
}

/* keys.jsonl of journal_dir into dir: its lines ({"first": N, ...}, N the
 * line's first key; its keys run to the next line's first) that name a key
 * written, the first line (the clock's start) and the lines naming tags. A line
 * not yet ended (being appended) is left out. */
static int
pt_write_keys(pt_tracer *tracer, const char *journal_dir, const char *dir)
{
    char from[PT_FLIGHT_FILES_PATH], path[PT_FLIGHT_FILES_PATH];
    size_t a = strlen(journal_dir);
    if (a + 16 > sizeof from)
        return 0;
    memcpy(from, journal_dir, a);
    memcpy(from + a, "/keys.jsonl", 12);
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return errno == ENOENT;     /* nothing named yet */
    struct stat st;
    if (fstat(in, &st) != 0) {
        close(in);
        return 0;
    }
    /* read, not mapped: the journal may truncate a line it failed to append (a
     * mapped page past the end would kill the clone) */
    char *text = NULL;
    size_t size = (size_t)st.st_size, n = 0;
    if (size > 0) {
        void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        text = map == MAP_FAILED ? NULL : map;
        while (text && n < size) {
            ssize_t got = read(in, text + n, size - n);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break;
            n += (size_t)got;
        }
    }
    close(in);
    if (size > 0 && !text)
        return 0;
    int out = pt_open_in(dir, "keys.jsonl", path);
    int ok = out >= 0;
    static const char first_field[] = "{\"first\": ", tags_field[] = "\"tags\": [";
    for (size_t at = 0; ok && at < n;) {
        const char *end = memchr(text + at, '\n', n - at);
        if (!end)
            break;
        size_t len = (size_t)(end - (text + at)) + 1;
        const char *next = end + 1;
        uint64_t first = UINT64_MAX, last = tracer->n_keys;
        if (len > sizeof first_field && !memcmp(text + at, first_field, sizeof first_field - 1))
            first = pt_leading_number(text + at + sizeof first_field - 1, len);
        if ((size_t)(next - text) + sizeof first_field < n &&
            !memcmp(next, first_field, sizeof first_field - 1))
            last = pt_leading_number(next + sizeof first_field - 1, n - (size_t)(next - text));
        int keep = first == UINT64_MAX || first == 0 || !pt_named;
        for (uint64_t key = first; !keep && key < last && key < (uint64_t)tracer->n_keys; key++)
            keep = pt_is_named(key);
        const char *tags = keep ? NULL : memmem(text + at, len, tags_field, sizeof tags_field - 1);
        if (tags && tags + sizeof tags_field - 1 < end && tags[sizeof tags_field - 1] != ']')
            keep = 1;
        if (keep)
            ok = pt_flight_put(out, text + at, len);
        at += len;
    }
    if (text)
        munmap(text, size);
    return (out < 0 || close(out) == 0) && ok;
}

/* ------------------------------------------------------------------------ */
/* events.bin                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    int fd;
    size_t used;            /* raw bytes waiting in pt_piece_in */
    int packed;
} pt_sink;

static int
pt_sink_flush(pt_sink *s)
{
    if (!s->packed || !s->used)
        return 1;
    uint64_t z = pt_deflate_zlib(pt_deflater_of_dumps, pt_piece_in, s->used, pt_piece_out,
                                 pt_piece_out_cap);
    uint32_t sizes[2] = {(uint32_t)s->used, (uint32_t)z};
    int ok = z > 0 && pt_flight_put(s->fd, sizes, sizeof sizes) && pt_flight_put(s->fd, pt_piece_out, z);
    s->used = 0;
    return ok;
}

static int
pt_sink_put(pt_sink *s, const void *data, size_t n)
{
    if (!s->packed)
        return pt_flight_put(s->fd, data, n);
    const char *p = data;
    while (n) {
        size_t room = PT_FLIGHT_PIECE - s->used, take = n < room ? n : room;
        memcpy(pt_piece_in + s->used, p, take);
        s->used += take;
        p += take;
        n -= take;
        if (s->used == PT_FLIGHT_PIECE && !pt_sink_flush(s))
            return 0;
    }
    return 1;
}

/* events.bin: the events of every thread (those in the window), oldest chunk
 * first, as spill blocks; compressed when the deflater is there. A chunk a
 * thread was linking at the clone is taken as far as the links say. A ring cut
 * short (a full disk) would show the calls whose ends it lost as open: it is
 * emptied instead. */
static int
pt_write_ring(pt_tracer *tracer, const char *dir, int64_t cutoff)
{
    char path[PT_FLIGHT_FILES_PATH];
    int fd = pt_open_in(dir, "events.bin", path);
    if (fd < 0)
        return 0;
    static const char header[16] = PT_EVENTS_HEADER;
    static const char packed_header[16] = "PTEVTZ01\0\0\x10\0\0\0\0\0";   /* piece: 1 MiB */
    pt_sink sink = {fd, 0, pt_compress_dumps && pt_deflater_of_dumps};
    int ok = (!sink.packed || pt_flight_put(fd, packed_header, sizeof packed_header)) &&
             pt_sink_put(&sink, header, sizeof header);
    for (pt_thread *t = tracer->threads; ok && t; t = t->next)
        PT_EACH_CHUNK(t, c) {
            uint64_t n = pt_chunk_events(t, c);
            int64_t base;
            uint64_t first = ok ? pt_window_start(c, n, cutoff, &base) : n;
            if (first >= n)
                continue;
            pt_spill_block block = {(uint32_t)t->index, 0, n - first, base};
            ok = pt_sink_put(&sink, &block, sizeof block) &&
                 pt_sink_put(&sink, c->events + first, (n - first) * sizeof(pt_event));
        }
    ok = ok && pt_sink_flush(&sink);
    if (!ok) {
        int err = errno;
        if (ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0)
            pt_flight_put(fd, header, sizeof header);
        close(fd);
        errno = err;
        return 0;
    }
    return close(fd) == 0;
}

int
pt_flight_write_ring(pt_tracer *tracer, const char *dir, const char *journal_dir,
                     int64_t until_ticks)
{
    int64_t cutoff = pt_window_ticks ? pt_ticks(tracer) - pt_window_ticks : 0;
    if (!pt_write_stacks(tracer, dir, until_ticks))
        return 0;
    pt_mark_named(tracer, cutoff);
    return pt_write_keys(tracer, journal_dir, dir) && pt_write_sources_of(tracer, dir) &&
           pt_write_ring(tracer, dir, cutoff);
}
