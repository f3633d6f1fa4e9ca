/* pt_pfnames.c - the interned names of a .pftrace's thread sequences, as
 * pt_pfread.c reads them back.
 *
 * Each sequence (a thread, or an asyncio task's lane) interns the names it uses
 * again after its state is cleared: a thousand lanes intern the same few names
 * a thousand times, each in the packet of the name's first begin. Our writer
 * gives a name the same iid in every sequence, so what an iid means is kept
 * once for the whole file (pt_pf_names: (table, iid) -> name bytes, filled by
 * Python as it decodes an entry), and each sequence keeps only which iids it
 * interned (a set in its pt_pf_thread). pt_pfread.c then takes a packet whose
 * interned entries all say what the file-wide table already says (marking them
 * interned on the sequence), and a begin whose key bytes are known only when
 * every iid they name was interned on its sequence: what Python would have
 * checked. Anything else goes to Python, which raises or learns a new meaning.
 */
#include "pt_export_internal.h"

#include <stdlib.h>
#include <string.h>

#define PT_PF_TABLES 3              /* InternedData fields 1-3: categories, event
                                     * names, debug annotation names */
#define PT_PF_FIRST_SLOTS 64

typedef struct {
    uint64_t iid;
    uint32_t table;                 /* 0: a free slot */
    uint32_t len;
    char *name;                     /* owned */
} pt_pf_meaning;

struct pt_pf_names {
    pt_pf_meaning *slots;           /* open addressing, at most half full */
    uint64_t mask;
    uint64_t used;
};

struct pt_pf_iid {
    uint64_t iid;
    uint32_t table;                 /* 0: a free slot */
};

static uint64_t
pt_pf_iid_hash(uint32_t table, uint64_t iid)
{
    return pt_mix(iid ^ ((uint64_t)table << 61));
}

pt_pf_names *
pt_pf_names_new(void)
{
    pt_pf_names *names = calloc(1, sizeof *names);
    if (names == NULL)
        return NULL;
    names->slots = calloc(PT_PF_FIRST_SLOTS, sizeof *names->slots);
    if (names->slots == NULL) {
        free(names);
        return NULL;
    }
    names->mask = PT_PF_FIRST_SLOTS - 1;
    return names;
}

void
pt_pf_names_free(pt_pf_names *names)
{
    if (names == NULL)
        return;
    for (uint64_t i = 0; i <= names->mask; i++)
        free(names->slots[i].name);
    free(names->slots);
    free(names);
}

static pt_pf_meaning *
pt_pf_names_find(const pt_pf_names *names, uint32_t table, uint64_t iid)
{
    for (uint64_t i = pt_pf_iid_hash(table, iid) & names->mask;; i = (i + 1) & names->mask) {
        pt_pf_meaning *slot = &names->slots[i];
        if (slot->table == 0 || (slot->table == table && slot->iid == iid))
            return slot;
    }
}

int
pt_pf_names_set(pt_pf_names *names, uint32_t table, uint64_t iid, const char *name, uint32_t len)
{
    if (table == 0 || table > PT_PF_TABLES)
        return PT_ERR_ARG;
    if (2 * (names->used + 1) > names->mask + 1) {
        uint64_t size = 2 * (names->mask + 1);
        pt_pf_meaning *slots = calloc(size, sizeof *slots);
        if (slots == NULL)
            return PT_ERR_NOMEM;
        pt_pf_names grown = {slots, size - 1, names->used};
        for (uint64_t i = 0; i <= names->mask; i++)
            if (names->slots[i].table)
                *pt_pf_names_find(&grown, names->slots[i].table, names->slots[i].iid) =
                    names->slots[i];
        free(names->slots);
        *names = grown;
    }
    char *copy = malloc((size_t)len + 1);
    if (copy == NULL)
        return PT_ERR_NOMEM;
    memcpy(copy, name, len);
    pt_pf_meaning *slot = pt_pf_names_find(names, table, iid);
    if (slot->table == 0)
        names->used++;
    free(slot->name);
    *slot = (pt_pf_meaning){iid, table, len, copy};
    return PT_OK;
}

static pt_pf_iid *
pt_pf_interned_find(const pt_pf_thread *t, uint32_t table, uint64_t iid)
{
    for (uint64_t i = pt_pf_iid_hash(table, iid) & t->interned_mask;;
         i = (i + 1) & t->interned_mask) {
        pt_pf_iid *slot = &t->interned[i];
        if (slot->table == 0 || (slot->table == table && slot->iid == iid))
            return slot;
    }
}

int
pt_pf_interned_add(pt_pf_thread *t, uint32_t table, uint64_t iid)
{
    if (table == 0 || table > PT_PF_TABLES)
        return PT_ERR_ARG;
    if (t->interned == NULL || 2 * (t->n_interned + 1) > t->interned_mask + 1) {
        uint64_t size = t->interned == NULL ? PT_PF_FIRST_SLOTS : 2 * (t->interned_mask + 1);
        pt_pf_iid *slots = calloc(size, sizeof *slots);
        if (slots == NULL)
            return PT_ERR_NOMEM;
        pt_pf_iid *old = t->interned;
        uint64_t old_size = old == NULL ? 0 : t->interned_mask + 1;
        t->interned = slots;
        t->interned_mask = size - 1;
        for (uint64_t i = 0; i < old_size; i++)
            if (old[i].table)
                *pt_pf_interned_find(t, old[i].table, old[i].iid) = old[i];
        free(old);
    }
    pt_pf_iid *slot = pt_pf_interned_find(t, table, iid);
    if (slot->table == 0) {
        *slot = (pt_pf_iid){iid, table};
        t->n_interned++;
    }
    return PT_OK;
}

int
pt_pf_interned_has(const pt_pf_thread *t, uint32_t table, uint64_t iid)
{
    return t->interned != NULL && pt_pf_interned_find(t, table, iid)->table != 0;
}

void
pt_pf_interned_clear(pt_pf_thread *t)
{
    if (t->n_interned)
        memset(t->interned, 0, (t->interned_mask + 1) * sizeof *t->interned);
    t->n_interned = 0;
}

void
pt_pf_interned_free(pt_pf_thread *t)
{
    free(t->interned);
    t->interned = NULL;
    t->interned_mask = t->n_interned = 0;
}

/* One entry of InternedData as our writer writes it: iid (field 1), then name
 * (field 2), nothing else. 0 if it is not that. */
static int
pt_pf_entry(const unsigned char *p, const unsigned char *end, uint64_t *iid,
            const unsigned char **name, uint64_t *len)
{
    if (p >= end || *p++ != 0x08 || !pt_pf_varint(&p, end, iid) || p >= end || *p++ != 0x12 ||
        !pt_pf_varint(&p, end, len) || *len != (uint64_t)(end - p))
        return 0;
    *name = p;
    return 1;
}

/* Walks InternedData's entries: checks each says what names says (mark 0), or
 * marks each interned on t (mark 1; all checked before). */
static int
pt_pf_entries(pt_pf_thread *t, const pt_pf_names *names, const unsigned char *p,
              const unsigned char *end, int mark)
{
    while (p < end) {
        unsigned char tag = *p++;
        uint64_t size, iid, len;
        const unsigned char *name;
        uint32_t table = tag >> 3;
        if ((tag & 7) != 2 || table == 0 || table > PT_PF_TABLES ||
            !pt_pf_varint(&p, end, &size) || size > (uint64_t)(end - p) ||
            !pt_pf_entry(p, p + size, &iid, &name, &len))
            return PT_PF_PYTHON;
        p += size;
        if (mark) {
            int status = pt_pf_interned_add(t, table, iid);
            if (status != PT_OK)
                return status;
            continue;
        }
        const pt_pf_meaning *known = pt_pf_names_find(names, table, iid);
        if (known->table == 0 || known->len != len || memcmp(known->name, name, len) != 0)
            return PT_PF_PYTHON;
    }
    return PT_OK;
}

int
pt_pf_take_interned(pt_pf_thread *t, const pt_pf_names *names, const char *data, uint64_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    int status = pt_pf_entries(t, names, p, p + len, 0);
    if (status != PT_OK)
        return status;
    return pt_pf_entries(t, names, p, p + len, 1);
}

/* Skips a field's value of wire type wire; 0 if cut or of a wire type we do not write. */
static int
pt_pf_skip(const unsigned char **p, const unsigned char *end, unsigned wire)
{
    uint64_t value;
    switch (wire) {
    case 0:
        return pt_pf_varint(p, end, &value);
    case 1:
    case 5: {
        uint64_t width = wire == 1 ? 8 : 4;
        if (width > (uint64_t)(end - *p))
            return 0;
        *p += width;
        return 1;
    }
    case 2:
        if (!pt_pf_varint(p, end, &value) || value > (uint64_t)(end - *p))
            return 0;
        *p += value;
        return 1;
    default:
        return 0;
    }
}

int
pt_pf_begin_interned(const pt_pf_thread *t, const unsigned char *p, uint64_t len)
{
    const unsigned char *end = p + len;
    while (p < end) {
        uint64_t tag, iid;
        if (!pt_pf_varint(&p, end, &tag))
            return 0;
        if (tag == (10 << 3) || tag == (3 << 3)) {          /* name_iid, a category_iid */
            if (!pt_pf_varint(&p, end, &iid) ||
                !pt_pf_interned_has(t, tag == (10 << 3) ? 2 : 1, iid))
                return 0;
        } else if (tag == (3 << 3 | 2)) {                   /* category_iids, packed */
            uint64_t size;
            if (!pt_pf_varint(&p, end, &size) || size > (uint64_t)(end - p))
                return 0;
            const unsigned char *packed_end = p + size;
            while (p < packed_end)
                if (!pt_pf_varint(&p, packed_end, &iid) || !pt_pf_interned_has(t, 1, iid))
                    return 0;
        } else if (tag == (4 << 3 | 2)) {                   /* a debug annotation */
            uint64_t size;
            if (!pt_pf_varint(&p, end, &size) || size > (uint64_t)(end - p))
                return 0;
            const unsigned char *annotation_end = p + size;
            while (p < annotation_end) {
                uint64_t inner;
                if (!pt_pf_varint(&p, annotation_end, &inner))
                    return 0;
                if (inner == (1 << 3)) {                    /* its name_iid */
                    if (!pt_pf_varint(&p, annotation_end, &iid) ||
                        !pt_pf_interned_has(t, 3, iid))
                        return 0;
                } else if (!pt_pf_skip(&p, annotation_end, inner & 7)) {
                    return 0;
                }
            }
        } else if ((tag >> 3) == 11 || !pt_pf_skip(&p, end, tag & 7)) {
            return 0;           /* a track of its own: Python checks it is the thread's */
        }
    }
    return 1;
}
