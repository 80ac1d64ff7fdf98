"""Stand-in for torch.cuda.memory: the allocator's statistics, memory history recording, and a
snapshot with the real pickle's shape. Frames and trace entries appear only while history is
recorded, as in torch.

The statistics take the path real torch's do. `memory_stats_as_nested_dict(device)` returns what
the C++ binding `torch._C._cuda_memoryStats` builds: six scalars, nine families of
`{all, small_pool, large_pool}` x `{current, peak, allocated, freed}`, and the two `oversize_*`
counter sets, 122 values in all. `memory_stats(device)` flattens that dict in Python into
dotted keys, sorted, in an OrderedDict, as torch/cuda/memory.py does.

Test controls (not in real torch): _history (the settings in force, or None), _history_calls;
the statistics' controls live in torch.cuda (_fake_set, _stats_garbage, _calls).
"""

import collections
import sys

_FAMILIES = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
             "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
_POOLS = ("all", "small_pool", "large_pool")
_METRICS = ("current", "peak", "allocated", "freed")
_SCALARS = ("num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
            "num_device_alloc", "num_device_free")
_MIB = 1 << 20

_history = None
_history_calls = []
_traces = []


def _cuda():
    from .. import cuda

    return cuda


def memory_stats_as_nested_dict(device=None):
    cuda = _cuda()
    cuda._calls.append(("memory_stats_as_nested_dict", device))
    if not cuda.is_initialized():
        return {}
    index = cuda.current_device() if device is None else int(device)
    if cuda._stats_garbage is not None:
        return cuda._stats_garbage
    return _allocator_stats(cuda, index)


def memory_stats(device=None):
    _cuda()._calls.append(("memory_stats", device))
    result = []

    def add(prefix, obj):
        if isinstance(obj, dict):
            if prefix:
                prefix += "."
            for key, value in obj.items():
                add(prefix + key, value)
        else:
            result.append((prefix, obj))

    add("", memory_stats_as_nested_dict(device=device))
    result.sort()
    return collections.OrderedDict(result)


def _allocator_stats(cuda, index):
    """The nested dict of one device, as the C++ binding builds it (one dict per counter set,
    nothing shared); each read moves the figures of a device in use."""
    used = index in cuda._used
    n = cuda._reads.get(index, 0) + 1 if used else 0
    cuda._reads[index] = n
    count = n
    size = (index + 1) * 100 * _MIB + n * _MIB if used else 0
    count_peak = count + 1 if used else 0
    size_peak = size + 7 * _MIB if used else 0
    out = {"num_alloc_retries": 0, "num_ooms": 0, "max_split_size": -1 if used else 0,
           "num_sync_all_streams": 0, "num_device_alloc": n, "num_device_free": 0}
    for family in _FAMILIES:
        value, peak = (size, size_peak) if family.endswith("_bytes") else (count, count_peak)
        out[family] = {pool: {"current": value, "peak": peak, "allocated": value, "freed": value}
                       for pool in _POOLS}
    for family in ("oversize_allocations", "oversize_segments"):
        out[family] = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
    for key, value in cuda._overrides.get(index, {}).items():
        _set_path(out, key.split("."), value)
    return out


def _set_path(nested, path, value):
    for part in path[:-1]:
        nested = nested.setdefault(part, {})
    nested[path[-1]] = value


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
