"""The trace model, between the recorder and the writers (record -> model ->
render; readers -> model; the command line on top):

trace         Trace, Call, ThreadInfo, Mark: a trace as data
walk          the streaming walk over a trace's events (c_src/pt_walk.c) and
              thread_batches(trace), the one batch stream every writer reads
streams       CallStreams: the one protocol a trace streams its calls through
saved         the one owner of a saved directory: save, save_spilled, load
saved_format  the saved directory's format: constants, hash ids, meta.json's layout

Nothing here imports render/, readers/, follow/, flight/ or the command line
(tests/test_structure.py). This package's __init__ imports none of them, so
importing one costs only that one.
"""
