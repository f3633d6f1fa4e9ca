"""The public names of following child processes, at their old path.

Following child processes and joining their traces lives in the follow/
package (see pytrace_cffi/follow/__init__.py); this module only re-exports
what code written for ``pytrace_cffi.processes`` uses. Nothing inside the
package imports it.
"""
from .follow.boot import start_from_environment
from .follow.exits import _real_exit
from .follow.finish import RunFinish, export_job, finish_run, job_dir_for
from .follow.identity import (BOOT_DIR, DEFAULT_MAX_EVENTS, ENV, JOB_FILE, KEYS_FILE,
                              LAUNCHED_FILE, NOT_PYTHON, PROCESS_FILE, UNFOLLOWED_FILE,
                              overflow_dir, process_facts)
from .follow.jobs import (NOT_READ_WHOLE, ProcessResult, not_read_whole, process_directories,
                          read_process, status, unfollowed, unfollowed_lines)
from .follow.join import LANE_STEP, _realtime_offset, join, joined_trace, write_any
from .follow.recover import MAX_THREADS, recover
from .follow.session import (FollowSession, continue_in_forked_child, hold_sigterm_for_fork,
                             release_sigterm)

__all__ = ["BOOT_DIR", "DEFAULT_MAX_EVENTS", "ENV", "FollowSession", "JOB_FILE", "KEYS_FILE",
           "LANE_STEP", "LAUNCHED_FILE", "MAX_THREADS", "NOT_PYTHON", "NOT_READ_WHOLE",
           "PROCESS_FILE", "ProcessResult", "RunFinish", "UNFOLLOWED_FILE",
           "continue_in_forked_child", "export_job", "finish_run", "hold_sigterm_for_fork",
           "job_dir_for", "join", "joined_trace", "not_read_whole", "overflow_dir",
           "process_directories", "process_facts", "read_process", "recover",
           "release_sigterm", "start_from_environment", "status", "unfollowed",
           "unfollowed_lines", "write_any", "_real_exit", "_realtime_offset"]
