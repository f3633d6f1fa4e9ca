/* pt_protobuf.h - writing protobuf varints, shared by the .pftrace encoders
 * (pt_perfetto.c's packets, pt_live.c's compressed_packets wrappers): one
 * definition of the wire format's one variable-length piece. */
#ifndef PT_PROTOBUF_H
#define PT_PROTOBUF_H

#include <stdint.h>

#define PT_VARINT_MAX 10            /* bytes of the widest varint (a uint64) */

static inline uint32_t
pt_varint_len(uint64_t v)
{
    if (v < (1u << 7))
        return 1;
    if (v < (1u << 14))
        return 2;
    uint32_t n = 3;
    for (v >>= 21; v; v >>= 7)
        n++;
    return n;
}

static inline char *
pt_put_varint(char *p, uint64_t v)
{
    if (v < (1u << 7)) {            /* most deltas and lengths: one or two bytes */
        *p++ = (char)v;
        return p;
    }
    if (v < (1u << 14)) {
        *p++ = (char)(v | 0x80);
        *p++ = (char)(v >> 7);
        return p;
    }
    while (v >= 0x80) {
        *p++ = (char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

#endif /* PT_PROTOBUF_H */
