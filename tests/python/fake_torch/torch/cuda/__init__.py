"""Stand-in for torch.cuda. Its allocator statistics (torch.cuda.memory) have the real shape and
values that change at each read.

Test controls (not in real torch): _fake_init(devices), _fake_set(index, key, value),
_fake_oom(index) (the observers only), _fake_alloc(index, nbytes) (an allocation that fails as
the real allocator does: observers, then OutOfMemoryError), _stats_garbage (what
memory_stats_as_nested_dict returns instead, when set), and the call log _calls.

Like the real torch.cuda, _lazy_call queues a callable until CUDA is initialized, and
_fake_init runs the queue right after initializing.
"""

import threading

from . import memory
# Re-exported as the real torch.cuda does (`from .memory import *`): the flattening memory_stats
# looks its nested function up in torch.cuda.memory, so a test can hide torch.cuda's copy (an
# older torch) and memory_stats still works.
from .memory import memory_stats, memory_stats_as_nested_dict  # noqa: F401

_initialized = False
_device_count = 2
_used = set()
_reads = {}
_overrides = {}
_peak_resets = []
_calls = []
_stats_garbage = None

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


def reset_peak_memory_stats(device=None):
    _calls.append(("reset_peak_memory_stats", device))
    _peak_resets.append(device)


# The current device is per thread, as CUDA's is: a rank's set_device(local_rank) leaves every
# other thread (the agent's among them) on device 0.
_current = threading.local()


def set_device(device):
    _current.index = int(device)


def current_device():
    _calls.append("current_device")
    return getattr(_current, "index", 0)
