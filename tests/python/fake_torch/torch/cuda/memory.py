"""Stand-in for torch.cuda.memory: memory history recording, and a snapshot with the real
pickle's shape. Frames and trace entries appear only while history is recorded, as in torch.

Test controls (not in real torch): _history (the settings in force, or None), _history_calls.
"""

import sys

_history = None
_history_calls = []
_traces = []


def _cuda():
    from .. import cuda

    return cuda


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           device=None, clear_history=False, **kwargs):
    global _history
    cuda = _cuda()
    cuda._calls.append("_record_memory_history")
    # The real one initializes CUDA when it is not yet: a stand-in that does the same lets the
    # tests see that the agent never calls it too early.
    cuda._fake_init(())
    _history_calls.append((enabled, context, stacks, max_entries))
    if enabled is None:
        _history = None
    else:
        if enabled not in ("state", "all") or stacks not in ("python", "all"):
            raise ValueError("bad arguments %r %r" % (enabled, stacks))
        _history = {"enabled": enabled, "context": context, "stacks": stacks,
                    "max_entries": max_entries}
    if clear_history or enabled is None:
        del _traces[:]


def _record_alloc_attempt(device, nbytes):
    if _history is not None and _history["enabled"] == "all":
        _traces.append({"action": "oom", "addr": 0, "size": nbytes, "stream": 0,
                        "time_us": 1, "device_free": 1 << 20, "frames": [_frame()]})
        del _traces[:-_history["max_entries"]]


def _record_alloc(device, nbytes):
    """An allocation that succeeds: while recording, the stack is captured as torch does for
    stacks="python" (a walk of the Python frames, kept unsymbolized), and with enabled="all" a
    trace entry goes into the ring of max_entries."""
    if _history is None:
        return
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    if _history["enabled"] == "all":
        _traces.append({"action": "alloc", "addr": 0, "size": nbytes, "stream": 0,
                        "time_us": 0, "frames": frames})
        if len(_traces) > 2 * _history["max_entries"]:
            del _traces[:-_history["max_entries"]]


def _frame():
    return {"filename": "train.py", "line": 12, "name": "forward"}


def _snapshot(device=None):
    frame = _frame()
    frames = [frame] if _history is not None else []
    return {
        "segments": [{
            "device": 0, "address": 1 << 40, "total_size": 2 << 20, "allocated_size": 1 << 20,
            "active_size": 1 << 20, "requested_size": 1000000, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": frames,
            "blocks": [
                {"address": 1 << 40, "size": 1 << 20, "requested_size": 1000000,
                 "state": "active_allocated", "frames": frames},
                {"address": (1 << 40) + (1 << 20), "size": 1 << 20, "requested_size": 0,
                 "state": "inactive", "frames": []},
            ],
        }],
        "device_traces": [list(_traces)],
        "allocator_settings": {"expandable_segments": False},
        "external_annotations": [],
    }
