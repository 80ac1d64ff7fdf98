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


# As in torch 2.7 and later: _lazy_call takes the lock that _lazy_init holds while it runs the
# queued calls (a plain Lock: the same thread cannot take it twice), and is_initialized() stays
# False until they have run.
_initialization_lock = threading.Lock()
_tls = threading.local()


def _lazy_call(callable, **kwargs):
    with _initialization_lock:
        if _initialized:
            callable()
        else:
            _queued_calls.append(callable)


def _fake_init(devices=(0,)):
    """What the program's first CUDA use would do: initialize (running the queued calls, as
    torch.cuda._lazy_init does, under its lock and before is_initialized() turns True) and
    allocate on these devices."""
    global _initialized
    # A queued call that initializes again (as _record_memory_history does) returns at once.
    if not _initialized and not getattr(_tls, "is_initializing", False):
        with _initialization_lock:
            _tls.is_initializing = True
            try:
                for call in _queued_calls:  # a call queued meanwhile runs too, as in torch
                    call()
                del _queued_calls[:]
            finally:
                del _tls.is_initializing
            _initialized = True
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
