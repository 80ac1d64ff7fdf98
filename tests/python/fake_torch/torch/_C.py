"""Stand-in for torch._C: the private OOM observer hook and the history-recording query."""

_oom_observers = []


def _cuda_attach_out_of_memory_observer(callback):
    _oom_observers.append(callback)


def _cuda_isHistoryEnabled():
    """Whether memory history is recorded, as the real binding answers it: the current device's
    allocator is asked, and _record_memory_history switches every device's at once."""
    from .cuda import memory

    return memory._history is not None
