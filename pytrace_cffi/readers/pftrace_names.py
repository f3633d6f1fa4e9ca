"""What a .pftrace's interned iids mean, kept once for the whole file (pftrace.py).

Each thread's sequence (a thread, or an asyncio task's lane) interns again, after
its state is cleared, the names it uses; our writer gives a name the same iid in
every sequence. So the names' meanings and the key bytes known to C
(pt_line_keys: a begin's TrackEvent bytes -> its key) are the file's, made once,
and each sequence keeps in C only which iids it interned (c_src/pt_pfnames.c):
C takes a packet interning names it already knows, and a known begin whose iids
its sequence interned. A meaning that changes (not as our writer writes) starts
the key bytes afresh, as they depend on what the iids mean.
"""
from .._core import ffi, lib

TABLE_CATEGORIES, TABLE_NAMES, TABLE_ANNOTATION_NAMES = 1, 2, 3    # InternedData's fields


def _checked(status):
    if status == lib.PT_ERR_NOMEM:
        raise MemoryError("out of memory while reading a .pftrace")
    return status


class InternedNames:
    """Per table, iid -> name; C's copy of them (pt_pf_names) and the key bytes
    made while they held (line_keys)."""

    def __init__(self, tables=None):
        tables = tables or {TABLE_CATEGORIES: {}, TABLE_NAMES: {}, TABLE_ANNOTATION_NAMES: {}}
        self.tables = {table: dict(names) for table, names in tables.items()}
        self.c = ffi.gc(lib.pt_pf_names_new(), lib.pt_pf_names_free)
        if self.c == ffi.NULL:
            raise MemoryError("out of memory while reading a .pftrace")
        for table, names in self.tables.items():
            for iid, name in names.items():
                self._set_c(table, iid, name)
        self._new_line_keys()

    def copy(self):
        """Another with the same meanings (and no key bytes yet): a reader's own,
        where it would change these, which another may be reading in C."""
        return InternedNames(self.tables)

    def learn(self, table, iid, name):
        """iid of table means name from now on; whether that changed what it meant."""
        names = self.tables[table]
        known = names.get(iid)
        if known == name:
            return False
        names[iid] = name
        self._set_c(table, iid, name)
        if known is not None:
            self._new_line_keys()
        return known is not None

    def _set_c(self, table, iid, name):
        data = name.encode("utf-8")         # a packet's: far below 4 GiB
        _checked(lib.pt_pf_names_set(self.c, table, iid, data, len(data)))

    def _new_line_keys(self):
        self.line_keys = ffi.gc(lib.pt_line_keys_new(), lib.pt_line_keys_free)
        if self.line_keys == ffi.NULL:
            raise MemoryError("out of memory while reading a .pftrace")

    def add_line_key(self, raw, key, flags):
        _checked(lib.pt_line_keys_add(self.line_keys, raw, len(raw), b"", 0, key, flags))


class SequenceNames:
    """One table's names as a sequence sees them: those it interned (in C)."""

    def __init__(self, sequence, table):
        self.sequence, self.table = sequence, table

    def __contains__(self, iid):
        return self.get(iid) is not None

    def __getitem__(self, iid):
        name = self.get(iid)
        if name is None:
            raise KeyError(iid)
        return name

    def get(self, iid, default=None):
        if type(iid) is not int or not 0 <= iid < 1 << 64 or \
                not lib.pt_pf_interned_has(self.sequence.c, self.table, iid):
            return default
        return self.sequence.reader.names.tables[self.table].get(iid, default)
