"""One module per output format, all fed by one streaming walk over the recorded
calls (the model's, model/walk.py: c_src/pt_walk.c driven from Python, no slice
table or Python object per call; a format that needs the whole slice table
builds it on first use):

chrome    Chrome Trace Event JSON (.json, .json.gz)
perfetto  Perfetto TrackEvent protobuf (.pftrace)
html      the self-contained HTML page (page/: its skeleton, stylesheet and scripts)
page_stacks
          the page's flame graphs and "imports" row, from the stacks below
saved     the saved-trace directory (save, load, spilled traces)
summary   the per-function summary table, and reading JSON traces back
speedscope, folded, pprof
          the flame-graph outputs (.speedscope.json, .folded, .pprof), over
stacks    their frames and the calls aggregated per distinct stack
protobuf  the protobuf wire format (perfetto, pprof)

The bulk of each is written in C (c_src/pt_export.c, pt_perfetto.c, pt_reduce.c,
pt_summary.c); these modules name things once and drive it.
"""
