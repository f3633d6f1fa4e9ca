"""Readers of what pytrace_cffi and torch.profiler write, one module each: our
Chrome JSON (chrome.py, streamed line by line: chrome_lines.py; the checks its
events share: chrome_events.py), our .pftrace (pftrace.py, its protobuf:
pftrace_packets.py) and torch.profiler's Chrome JSON (torch_chrome.py). A saved
or spilled directory is read by its one owner, model/saved.py; ../_safe_read.py
opens a directory's files safely. formats.read picks one by a file's name. Readers never import formats.py (what a
name says, gzip, is passed in); this package imports none of them, so that
importing one costs only that one."""
