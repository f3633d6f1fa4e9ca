/* pt_internal.h - what the recording units and the export units of the core
 * (prefix pt_) both use, and only that: the interface (pt_record.h, pt_read.h,
 * pt_export.h: the event and slice formats both sides speak), the compiler's
 * spellings, and pytrace_cffi's own threads (pt_own.c: the flight recorder's
 * thread on the recording side, the live encoder's on the export side).
 *
 * The sides meet nowhere else. The export units (the walk, the encoders, the
 * readers of saved files: pt_export_internal.h) never see the tracer's
 * structures (chunks, threads, keys) nor Python: they are fed events and slices
 * through the interface (a stopped tracer's chunks come to the walk from Python,
 * through pt_thread_events_at). What recording shares is pt_record_internal.h.
 */
#ifndef PT_INTERNAL_H
#define PT_INTERNAL_H

#include "pt_export.h"     /* with pt_read.h and pt_record.h: the interface */

#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

/* For the hooks' shared bodies, so that each thin callback folds its constants;
 * and for the rarer cases kept out of them. */
#if defined(__GNUC__) || defined(__clang__)
#define PT_ALWAYS_INLINE inline __attribute__((always_inline))
#define PT_NOINLINE __attribute__((noinline))
#else
#define PT_ALWAYS_INLINE inline
#define PT_NOINLINE
#endif
/* Branch layout for the hooks (spelt as pt_perfetto.c spells it) */
#if defined(__GNUC__)
#define PT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define PT_UNLIKELY(x) (x)
#endif

/* An event's word (pt_record.h): an aux event's sub-kind and payload, and the word of
 * one. Both sides read events; recording writes them. */
#define PT_AUX_PAYLOAD_SHIFT (PT_KEY_SHIFT + PT_AUX_SHIFT)
static inline int
pt_is_aux(uint32_t key_kind, uint32_t sub_kind)
{
    return (key_kind & (PT_AUX_MASK << PT_KEY_SHIFT | PT_KIND_MASK)) ==
           (sub_kind << PT_KEY_SHIFT | PT_EV_AUX);
}
static inline uint32_t
pt_aux_payload(uint32_t key_kind)
{
    return key_kind >> PT_AUX_PAYLOAD_SHIFT;
}
static inline uint32_t
pt_aux_word(uint32_t sub_kind, uint32_t payload)
{
    return payload << PT_AUX_PAYLOAD_SHIFT | sub_kind << PT_KEY_SHIFT | PT_EV_AUX;
}
/* The ticks an event moves its thread's clock by: its delta, and a TIME aux event's
 * payload as the high bits. */
static inline uint64_t
pt_event_ticks(const pt_event *ev)
{
    uint64_t ticks = ev->delta;
    if (pt_is_aux(ev->key_kind, PT_AUX_TIME))
        ticks |= (uint64_t)pt_aux_payload(ev->key_kind) << 32;
    return ticks;
}
/* The most a TIME aux event carries: 2^58 - 1 ticks (years); a longer pause is several. */
#define PT_AUX_TIME_MAX (((uint64_t)PT_AUX_PAYLOADS << 32) - 1)

/* pt_own.c */
/* The calling thread's OS name becomes PT_OWN_OS_NAME (Linux; pt_own.c says why;
 * _own_threads.py looks for it in /proc/self/task/TID/comm). */
#define PT_OWN_OS_NAME "pytrace_cffi"
void pt_own_os_thread_name(void);
/* pthread_create of a thread of ours, born with every signal blocked (pt_own.c). */
int pt_own_thread_create(pthread_t *thread, void *(*main)(void *), void *arg);

/* A file kept open (the spill file, the live encoder's reading of it) is ours
 * only while its descriptor names the file we opened: a program that closes
 * every descriptor (os.closerange, a daemon's start-up) frees the number, and
 * its next open() takes it. Checked before each use, so that neither our writes,
 * our reads nor our close() land in the program's file. */
typedef struct {
    dev_t dev;
    ino_t ino;
} pt_file_id;

static inline int
pt_file_id_of(int fd, pt_file_id *id)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 0;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    return 1;
}

static inline int
pt_fd_names(int fd, const pt_file_id *id)
{
    pt_file_id now;
    return pt_file_id_of(fd, &now) && now.dev == id->dev && now.ino == id->ino;
}

#endif /* PT_INTERNAL_H */
