"""Stand-in for torch.cuda: flat memory_stats keys like the real allocator, values that change.

Test controls (not in real torch): _fake_init(devices), _fake_set(index, key, value),
_fake_oom(index) (the observers only), _fake_alloc(index, nbytes) (an allocation that fails as
the real allocator does: observers, then OutOfMemoryError), _stats_garbage (what memory_stats
returns instead, when set), and the call log _calls.

Like the real torch.cuda, _lazy_call queues a callable until CUDA is initialized, and
_fake_init runs the queue right after initializing.
"""

from collections import OrderedDict

from . import memory  # noqa: F401

_initialized = False
_device_count = 2
_used = set()
_reads = {}
_overrides = {}
_peak_resets = []
_calls = []
_stats_garbage = None

_FAMILIES = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
             "requested_bytes", "allocation", "segment", "active", "inactive_split")
_POOLS = ("all", "small_pool", "large_pool")
_METRICS = ("current", "peak", "allocated", "freed")
MIB = 1 << 20


def is_initialized():
    _calls.append("is_initialized")
    return _initialized


def device_count():
    _calls.append("device_count")
    return _device_count


_queued_calls = []


class OutOfMemoryError(RuntimeError):
    pass


def _lazy_call(callable, **kwargs):
    if _initialized:
        callable()
    else:
        _queued_calls.append(callable)


def _fake_init(devices=(0,)):
    """What the program's first CUDA use would do: initialize (running the queued calls, as
    torch.cuda._lazy_init does) and allocate on these devices."""
    global _initialized
    if not _initialized:
        _initialized = True
        queued = list(_queued_calls)
        del _queued_calls[:]
        for call in queued:
            call()
    _used.update(devices)


def _fake_malloc(index, nbytes):
    """An allocation that succeeds (nothing is allocated; history is recorded if on)."""
    memory._record_alloc(index, nbytes)


def _fake_alloc(index, nbytes):
    """An allocation the device cannot satisfy: what the caching allocator does on an OOM."""
    _fake_init((index,))
    memory._record_alloc_attempt(index, nbytes)
    _fake_oom(index, requested=nbytes)
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes (stand-in)" % nbytes)


def _fake_set(index, key, value):
    _overrides.setdefault(index, {})[key] = value


def _fake_oom(index, requested=1 << 30):
    from .. import _C

    _overrides.setdefault(index, {})
    current = _overrides[index].get("num_ooms", 0)
    _overrides[index]["num_ooms"] = current + 1
    for callback in list(_C._oom_observers):
        callback(index, requested, 40 * MIB, 1 * MIB)


def memory_stats(device=None):
    _calls.append(("memory_stats", device))
    if _stats_garbage is not None:
        return _stats_garbage
    if not _initialized:
        return OrderedDict()
    index = 0 if device is None else int(device)
    out = OrderedDict()
    used = index in _used
    n = _reads.get(index, 0) + 1 if used else 0
    _reads[index] = n
    for family in _FAMILIES:
        for pool in _POOLS:
            for metric in _METRICS:
                base = 0
                if used:
                    base = (index + 1) * 100 * MIB + n * MIB if family.endswith("_bytes") else n
                    if metric == "peak":
                        base += 7 * MIB if family.endswith("_bytes") else 1
                out["%s.%s.%s" % (family, pool, metric)] = base
    for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                "num_device_free", "max_split_size"):
        out[key] = 0
    if used:
        out["num_device_alloc"] = n
        out["max_split_size"] = -1
    out.update(_overrides.get(index, {}))
    return out


def reset_peak_memory_stats(device=None):
    _calls.append(("reset_peak_memory_stats", device))
    _peak_resets.append(device)


_current = 0


def current_device():
    _calls.append("current_device")
    return _current
