"""This process's running session (start() without its stop()) and the lock around
it, shared by the public API (pytrace_cffi/__init__.py) and the code that follows
child processes (follow/), which stops it from exit hooks and starts one in a forked
child or a new interpreter's bootstrap.

follow/ sits below the package's __init__, which imports it, so it reaches the
public start() and stop() through `api`, filled by __init__ when it is imported:
importing the package from follow/ would make an import circle."""
import threading

lock = threading.Lock()
session = None      # the running Session (or FollowSession), or None
api = {}            # "start", "stop": pytrace_cffi.start and pytrace_cffi.stop;
                    # "stop_at_exit": stop() of a session the program left running


def has_session():
    """Whether start() ran without its stop(), recording or not."""
    return session is not None
