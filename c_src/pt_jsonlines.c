/* pt_jsonlines.c - reading back the calls of a Chrome JSON that pytrace_cffi wrote.
 *
 * Our JSON has one event per line and pt_format_slices writes every call the same
 * way, so a big file is read line by line: this unit takes the run of call lines
 * of one thread whose function (category, name and extra args, as text) is known,
 * and stops at the first line it does not take whole - a thread_name event, a new
 * function, anything unexpected or malformed - for Python to read that one line
 * with the full JSON parser and its error messages. Nothing here trusts the text:
 * every read is bounded by the line's end. A thread keeps only the calls that
 * enclose the next one and, when reading calls for use, a batch of them: the
 * first read of a file checks and counts, later reads hand out batches.
 */
#include "pt_export_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t hash;
    char *text;             /* ident then extra, owned */
    uint32_t ident_len;
    uint32_t extra_len;
    uint32_t key;
    uint32_t flags;
} pt_line_key;

struct pt_line_keys {
    pt_line_key *slots;     /* open addressing; text == NULL marks a free slot */
    uint64_t mask;
    uint64_t used;
};

#define PT_LINE_KEYS_FIRST 1024

static uint64_t
pt_fnv(uint64_t h, const char *s, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t
pt_line_key_hash(const char *ident, uint32_t ident_len, const char *extra, uint32_t extra_len)
{
    uint64_t h = pt_fnv(14695981039346656037ull, ident, ident_len);
    h = pt_fnv(h ^ 0xff, extra, extra_len);   /* 0xff never occurs in UTF-8 text */
    return h;
}

pt_line_keys *
pt_line_keys_new(void)
{
    pt_line_keys *keys = calloc(1, sizeof *keys);
    if (keys == NULL)
        return NULL;
    keys->slots = calloc(PT_LINE_KEYS_FIRST, sizeof *keys->slots);
    if (keys->slots == NULL) {
        free(keys);
        return NULL;
    }
    keys->mask = PT_LINE_KEYS_FIRST - 1;
    return keys;
}

void
pt_line_keys_free(pt_line_keys *keys)
{
    if (keys == NULL)
        return;
    for (uint64_t i = 0; i <= keys->mask; i++)
        free(keys->slots[i].text);
    free(keys->slots);
    free(keys);
}

static pt_line_key *
pt_line_keys_find(const pt_line_keys *keys, uint64_t hash, const char *ident,
                  uint32_t ident_len, const char *extra, uint32_t extra_len)
{
    for (uint64_t i = hash & keys->mask;; i = (i + 1) & keys->mask) {
        pt_line_key *slot = &keys->slots[i];
        if (slot->text == NULL)
            return slot;
        if (slot->hash == hash && slot->ident_len == ident_len && slot->extra_len == extra_len &&
            memcmp(slot->text, ident, ident_len) == 0 &&
            memcmp(slot->text + ident_len, extra, extra_len) == 0)
            return slot;
    }
}

int
pt_line_keys_lookup(const pt_line_keys *keys, const char *text, uint32_t len, uint32_t *key,
                    uint32_t *flags)
{
    const pt_line_key *known = pt_line_keys_find(keys, pt_line_key_hash(text, len, "", 0),
                                                 text, len, "", 0);
    if (known->text == NULL)
        return 0;
    *key = known->key;
    *flags = known->flags;
    return 1;
}

int
pt_line_keys_add(pt_line_keys *keys, const char *ident, uint32_t ident_len, const char *extra,
                 uint32_t extra_len, uint32_t key, uint32_t flags)
{
    if (2 * (keys->used + 1) > keys->mask + 1) {
        /* at most half full, so a probe always ends at a free slot */
        uint64_t size = 2 * (keys->mask + 1);
        pt_line_key *slots = calloc(size, sizeof *slots);
        if (slots == NULL)
            return PT_ERR_NOMEM;
        pt_line_keys grown = {slots, size - 1, keys->used};
        for (uint64_t i = 0; i <= keys->mask; i++)
            if (keys->slots[i].text != NULL) {
                uint64_t j = keys->slots[i].hash & grown.mask;
                while (slots[j].text != NULL)
                    j = (j + 1) & grown.mask;
                slots[j] = keys->slots[i];
            }
        free(keys->slots);
        *keys = grown;
    }
    uint64_t hash = pt_line_key_hash(ident, ident_len, extra, extra_len);
    pt_line_key *slot = pt_line_keys_find(keys, hash, ident, ident_len, extra, extra_len);
    if (slot->text == NULL) {
        char *text = malloc((size_t)ident_len + extra_len + 1);
        if (text == NULL)
            return PT_ERR_NOMEM;
        memcpy(text, ident, ident_len);
        memcpy(text + ident_len, extra, extra_len);
        slot->text = text;
        slot->hash = hash;
        slot->ident_len = ident_len;
        slot->extra_len = extra_len;
        keys->used++;
    }
    slot->key = key;
    slot->flags = flags;
    return PT_OK;
}

struct pt_line_open {
    int64_t index;
    int64_t start;
    int64_t end;
};

pt_line_thread *
pt_line_thread_new(void)
{
    pt_line_thread *thread = calloc(1, sizeof *thread);
    if (thread != NULL)
        thread->limit = UINT64_MAX;
    return thread;
}

void
pt_line_thread_free(pt_line_thread *thread)
{
    if (thread == NULL)
        return;
    free(thread->open);
    free(thread);
}

int
pt_line_thread_push(pt_line_thread *thread, int64_t start, int64_t end, uint32_t key,
                    uint32_t flags, int64_t parent)
{
    if (parent < -1 || parent >= (int64_t)thread->n || start > end)
        return PT_ERR_ARG;
    /* Calls come in start order: the parent of the next is the last taken or
     * one of its enclosing calls; the others have ended. */
    while (thread->n_open && thread->open[thread->n_open - 1].index != parent)
        thread->n_open--;
    if (parent >= 0) {
        if (!thread->n_open)
            return PT_ERR_STATE;
        const pt_line_open *p = &thread->open[thread->n_open - 1];
        if (start < p->start || end > p->end)
            return PT_ERR_STATE;
    }
    if (thread->slices != NULL && thread->count == thread->cap)
        return PT_ERR_ARG;
    if (thread->n_open == thread->open_cap) {
        uint64_t cap = thread->open_cap ? 2 * thread->open_cap : 64;
        pt_line_open *grown = realloc(thread->open, cap * sizeof *grown);
        if (grown == NULL)
            return PT_ERR_NOMEM;
        thread->open = grown;
        thread->open_cap = cap;
    }
    uint64_t depth = thread->n_open;
    if (depth > UINT32_MAX)
        return PT_ERR_ARG;
    thread->open[thread->n_open++] = (pt_line_open){(int64_t)thread->n, start, end};
    if (thread->slices != NULL) {
        pt_slice *s = &thread->slices[thread->count++];
        s->start = start;
        s->end = end;
        s->key = key;
        s->flags = flags;
        s->parent = parent;
        s->tag = 0;
        s->depth = (uint32_t)depth;
    }
    if (depth > thread->max_depth)
        thread->max_depth = (uint32_t)depth;
    thread->digest += pt_call_digest(start, end, key, flags, parent, thread->n);
    thread->n++;
    return PT_OK;
}

/* Cursor over one line [p, end): each reader advances it or returns 0. */
typedef struct {
    const char *p;
    const char *end;
} pt_cursor;

static int
pt_literal(pt_cursor *c, const char *s, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

#define PT_LITERAL(c, s) pt_literal((c), (s), sizeof(s) - 1)

/* An unsigned decimal of 1 to max_digits digits (max_digits <= 19: no overflow),
 * without the leading zeros JSON forbids. */
static int
pt_digits(pt_cursor *c, int max_digits, uint64_t *value)
{
    const char *first = c->p;
    uint64_t v = 0;
    int n = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (++n > max_digits)
            return 0;
        v = v * 10 + (uint64_t)(*c->p++ - '0');
    }
    *value = v;
    return n > 0 && !(n > 1 && *first == '0');
}

/* Microseconds with exactly three decimals, as pt_put_us writes them, in ns. */
static int
pt_microseconds(pt_cursor *c, int64_t *ns)
{
    uint64_t whole, frac;
    const char *frac_start;
    if (!pt_digits(c, 13, &whole) || !PT_LITERAL(c, "."))
        return 0;
    frac_start = c->p;
    for (int i = 0; i < 3; i++)
        if (c->p == c->end || *c->p < '0' || *c->p > '9')
            return 0;
        else
            c->p++;
    frac = (uint64_t)(frac_start[0] - '0') * 100 + (uint64_t)(frac_start[1] - '0') * 10 +
           (uint64_t)(frac_start[2] - '0');
    *ns = (int64_t)(whole * 1000 + frac);
    return 1;
}

/* Past a JSON string's closing quote, from just after its opening one. */
static int
pt_skip_string(pt_cursor *c)
{
    while (c->p < c->end) {
        char ch = *c->p++;
        if (ch == '"')
            return 1;
        if (ch == '\\') {
            if (c->p == c->end)
                return 0;
            c->p++;
        }
    }
    return 0;
}

/* One call line [line, end) (end at its '\n') into thread, or 0 to leave it. */
static int
pt_call_line(const pt_line_keys *keys, pt_line_thread *thread, const char *line,
             const char *end)
{
    pt_cursor c = {line, end};
    uint64_t pid, tid, call_id, parent_id = 0, thread_index;
    int64_t ts, dur, start, parent = -1;
    /* the line ends "}}," (not the file's last event) */
    if (end - line < 3 || memcmp(end - 3, "}},", 3) != 0)
        return 0;
    c.end = end - 3;
    if (!PT_LITERAL(&c, "{\"ph\":\"X\",\"pid\":") || !pt_digits(&c, 19, &pid) ||
        !PT_LITERAL(&c, ",\"tid\":") || !pt_digits(&c, 19, &tid) || tid != thread->tid)
        return 0;
    if (!PT_LITERAL(&c, ","))
        return 0;
    const char *ident = c.p;
    if (!PT_LITERAL(&c, "\"cat\":\"python_function\",\"name\":\"") &&
        !PT_LITERAL(&c, "\"cat\":\"user_annotation\",\"name\":\""))
        return 0;
    if (!pt_skip_string(&c))
        return 0;
    const char *ident_end = c.p;
    if (!PT_LITERAL(&c, ",\"ts\":") || !pt_microseconds(&c, &ts) ||
        !PT_LITERAL(&c, ",\"dur\":") || !pt_microseconds(&c, &dur) ||
        !PT_LITERAL(&c, ",\"args\":{\"Python id\":") || !pt_digits(&c, 19, &call_id) ||
        call_id != thread->first_id + thread->n ||
        !PT_LITERAL(&c, ",\"Python parent id\":"))
        return 0;
    if (!PT_LITERAL(&c, "null")) {
        if (!pt_digits(&c, 19, &parent_id) || parent_id < thread->first_id ||
            parent_id - thread->first_id >= thread->n)
            return 0;
        parent = (int64_t)(parent_id - thread->first_id);
    }
    if (!PT_LITERAL(&c, ",\"Python thread\":") || !pt_digits(&c, 10, &thread_index) ||
        thread_index != thread->thread_index)
        return 0;
    /* the rest is the extra args: empty or "," and members */
    if (c.p != c.end && *c.p != ',')
        return 0;
    if ((uint64_t)(ident_end - ident) > UINT32_MAX || (uint64_t)(c.end - c.p) > UINT32_MAX)
        return 0;
    uint32_t ident_len = (uint32_t)(ident_end - ident), extra_len = (uint32_t)(c.end - c.p);
    const pt_line_key *known = pt_line_keys_find(
        keys, pt_line_key_hash(ident, ident_len, c.p, extra_len), ident, ident_len, c.p, extra_len);
    if (known->text == NULL)
        return 0;
    /* ts and dur are below 10^16 (13 digits of microseconds): only a start near
     * INT64_MAX overflows, and Python reports that one */
    if (thread->start_ns > INT64_MAX - ts || thread->start_ns + ts > INT64_MAX - dur)
        return 0;
    start = thread->start_ns + ts;
    if (pt_line_thread_push(thread, start, start + dur, known->key, known->flags, parent) != PT_OK)
        return 0;
    thread->pid = pid;
    return 1;
}

uint64_t
pt_read_call_lines(const pt_line_keys *keys, pt_line_thread *thread, const char *text,
                   uint64_t len, uint64_t *pos)
{
    uint64_t lines = 0;
    const char *end = text + len;
    const char *p = text + *pos;
    while (p < end && thread->n < thread->limit &&
           (thread->slices == NULL || thread->count < thread->cap)) {
        const char *newline = memchr(p, '\n', (size_t)(end - p));
        if (newline == NULL || !pt_call_line(keys, thread, p, newline))
            break;
        p = newline + 1;
        lines++;
    }
    *pos = (uint64_t)(p - text);
    return lines;
}
