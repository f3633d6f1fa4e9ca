"""What the rest of the package asks of a tracing session, declared in one place
(issue 32). _tracer.Session derives from SessionBase, and so do follow/'s
FollowSession (a process traced into a job's directory: with children followed,
a flight recorder's ring, or start(output=FILE)). Code reads these
plainly, session.job_dir, never getattr(session, "job_dir", None): a plain
Session has the values below; the classes that do more set or override them.
"""


class SessionBase:
    """The attributes every session has, with what a plain start()..stop() says."""

    # Where the trace goes besides session.output:
    job_dir = None              # the job's directory (FollowSession: follow_children,
                                # a flight recorder)
    temporary_job = False       # job_dir is removed at stop (a flight recorder's,
                                # without an output)
    output_file = None          # start(output=FILE): the file written at stop
                                # (FollowSession)
    follows_children = False    # its children are traced too (FollowSession)
    flight = None               # its running FlightRecorder (a ring FollowSession)
    process_meta = None         # who is who in a job: added to a spilled trace's
                                # meta.json (FollowSession)
    watcher = None              # the _torch.TorchWatcher naming torch's calls
                                # (with_modules; its .collectives the flight
                                # recorder's, or None)
    fixed_ns_per_tick = None    # the clock's slope a live .pftrace encoder fixed
                                # while it ran (FollowSession)
    # What stop() finds:
    spill_problem = None        # what stop() raises about the spill, or None
                                # (spill.note_spill_problem)
    recorders_lost = ()         # the _runtime.RECORDERS the program took away
                                # while tracing (_tracer.Session.stop)
    sigterm_waits = None        # a context manager in which a SIGTERM waits until
                                # stop() is done, or None (FollowSession)
    _task_lanes = None          # log_async's task lanes while it runs (_tracer.Session;
                                # the flight recorder's dumps name lanes by it)

    def finish_live(self, facts):
        """spill.finish_spill's call once the last events are in events.bin: a
        live encoder encodes its last events (FollowSession)."""

    def forget_output_file(self):
        """start() failed: nothing made for the output stays (FollowSession)."""

    def write_output_file(self, result, interrupted=False, reraise=False):
        """stop()'s last step: what stop() returns, result or what writing
        output_file made of it (FollowSession: a WrittenTrace; interrupted: a
        Ctrl-C came as the trace was saved, and the file is not written;
        reraise: a Ctrl-C while it is written is raised again)."""
        return result
