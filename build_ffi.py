"""cffi build script for pytrace_cffi's C core (API mode, out of line).

The C lives in real files under c_src/; this script only lists them and repeats
the plain-C interface of c_src/pt_core.h for cffi. Run by setuptools through
``cffi_modules`` (see setup.py), or directly: ``python build_ffi.py``.
"""
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
C_SRC = os.path.join(HERE, "c_src")

# The oldest CPython we load on; the module is tagged abi3 for it.
LIMITED_API = "0x03090000"

CDEF = """
#define PT_OK 0
#define PT_ERR_NOMEM -1
#define PT_ERR_STATE -2
#define PT_ERR_PYTHON -3
#define PT_ERR_ARG -4

#define PT_EV_PY_CALL 0
#define PT_EV_PY_RETURN 1
#define PT_EV_C_CALL 2
#define PT_EV_C_RETURN 3
#define PT_EV_PY_SEED 4
#define PT_EV_TAG 5
#define PT_EV_ARGS 6
#define PT_EV_TIME 7
#define PT_TAG_ARGS_BIT 0x80000000
#define PT_HIDE_SUBTREE 1
#define PT_HIDE_ALONE 2
#define PT_KEY_SHIFT 3
#define PT_KIND_MASK 7

#define PT_FLAG_C_CALLS 1
#define PT_FLAG_NOOP 2
#define PT_FLAG_TSC 4

#define PT_BACKEND_PROFILE 1
#define PT_BACKEND_MONITOR 2

#define PT_SLICE_C 1
#define PT_SLICE_SEEDED 2
#define PT_SLICE_OPEN_AT_STOP 4

typedef struct pt_tracer pt_tracer;

typedef struct {
    uint32_t delta;
    uint32_t key_kind;
} pt_event;

typedef struct {
    uint64_t tstate_id;
    uint64_t ident;
    uint64_t native_id;
    uint64_t n_events;
    uint64_t n_calls;
    uint64_t dropped;
    int64_t base_ticks;
    uint64_t spilled;
} pt_thread_info;

typedef struct {
    int64_t start;
    int64_t end;
    uint32_t key;
    uint32_t flags;
    int64_t parent;
    uint32_t tag;
    uint32_t depth;
} pt_slice;

pt_tracer *pt_tracer_new(int flags, int backend);
void pt_tracer_free(pt_tracer *tracer);
void pt_release_pool(void);
const char *pt_last_error(pt_tracer *tracer);

int pt_start(pt_tracer *tracer, int tool_id, long long event_mask);
int pt_attach_current_thread(pt_tracer *tracer, int skip_frames);
int pt_stop(pt_tracer *tracer);
int pt_hot_error(pt_tracer *tracer);
int pt_monitor_callbacks(pt_tracer *tracer, void *py_list);
int pt_set_watch(pt_tracer *tracer, void *py_tuple);
int pt_set_bounds(pt_tracer *tracer, uint64_t max_events, const char *spill_path);
int pt_set_filters(pt_tracer *tracer, uint32_t max_depth, void *py_skip);
int pt_spill_rest(pt_tracer *tracer);
uint64_t pt_spilled_events(pt_tracer *tracer);
int pt_replay_buffer(const pt_event *events, uint64_t n, int64_t base_ticks, int64_t stop_ticks,
                     const uint8_t *hidden, uint32_t n_hidden, int64_t tick0, int64_t ns0,
                     double ns_per_tick, pt_slice *out, uint64_t cap, uint64_t *n_out);
uint64_t pt_count_calls(const pt_event *events, uint64_t n);
uint32_t pt_max_depth(const pt_slice *slices, uint64_t n);
uint64_t pt_drop_short_slices(pt_slice *slices, uint64_t n, int64_t min_ns, int64_t *new_index);
int64_t pt_validate_events(const pt_event *events, uint64_t n, uint32_t n_keys);
int pt_annotation_api(void *py_dict);
int pt_annotation_data(pt_tracer *tracer, void *py_args_list, void *py_marks_list);

int pt_tsc_supported(void);
void pt_clock_pair(int use_tsc, int64_t *ticks, int64_t *ns);
int64_t pt_start_ns(pt_tracer *tracer);
int64_t pt_stop_ns(pt_tracer *tracer);
int64_t pt_start_ticks(pt_tracer *tracer);
int64_t pt_stop_ticks(pt_tracer *tracer);
uint64_t pt_current_tstate_id(void);
int pt_thread_count(pt_tracer *tracer);
int pt_thread_get_info(pt_tracer *tracer, int index, pt_thread_info *out);
int pt_thread_copy_events(pt_tracer *tracer, int index, pt_event *out, uint64_t cap);
int pt_thread_replay(pt_tracer *tracer, int index, const uint8_t *hidden,
                     uint32_t n_hidden, int64_t tick0, int64_t ns0,
                     double ns_per_tick, pt_slice *out, uint64_t cap,
                     uint64_t *n_out);
uint64_t pt_tagged_slices(const pt_slice *slices, uint64_t n, uint64_t *out, uint64_t cap);
int64_t pt_validate_slices(const pt_slice *slices, uint64_t n, uint32_t n_keys);
uint32_t pt_key_count(pt_tracer *tracer);
int pt_format_slices(const pt_slice *slices, uint64_t n, uint64_t *next,
                     const char *const *names, const uint32_t *name_lens,
                     const char *const *extras, const uint32_t *extra_lens, uint32_t n_keys,
                     const char *prefix, uint32_t prefix_len, int64_t base_ns,
                     uint64_t first_id, uint32_t thread_index, char *out, uint64_t cap,
                     uint64_t *written);
int pt_key_sources(pt_tracer *tracer, uint32_t first, void *py_list);
"""

SOURCES = ["pt_core.c", "pt_hooks.c", "pt_replay.c", "pt_export.c", "pt_annotate.c"]

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "pytrace_cffi._core",
    '#include "pt_core.h"',
    # Relative to this file: setuptools runs from here and wants relative paths.
    sources=[os.path.join("c_src", name) for name in SOURCES],
    include_dirs=[C_SRC],
    define_macros=[("Py_LIMITED_API", LIMITED_API)],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Werror=implicit-function-declaration",
                        "-Werror=int-conversion"],
    py_limited_api=True,
)

if __name__ == "__main__":
    # In-place build for development: pytrace_cffi/_core.abi3.so beside the package.
    os.chdir(HERE)
    ffibuilder.compile(tmpdir=HERE, verbose=False)
