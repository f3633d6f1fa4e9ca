"""torch's flight recorder's dump (torch 2.13: `_dump_fr_trace_json`), as the
test asks by STAND_IN_FR: "hang" (never answers), "raise", or else one entry."""
import json
import os
import time


def _dump_fr_trace_json(includeCollectives=None, onlyActive=None):
    how = os.environ.get("STAND_IN_FR")
    if how == "hang":
        time.sleep(600)
    if how == "raise":
        raise RuntimeError("stand-in: no trace")
    return json.dumps({"version": "2.10", "entries": [{
        "collective_seq_id": 3, "profiling_name": "gloo:all_reduce",
        "process_group": ["0", "default_pg"], "input_sizes": [[256]],
        "input_dtypes": ["Float"], "state": "scheduled", "retired": False}],
        "pg_status": {"0": {"last_enqueued_collective": "3"}}}).encode()
