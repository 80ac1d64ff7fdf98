"""Stand-in for torch._C: only the private OOM observer hook."""

_oom_observers = []


def _cuda_attach_out_of_memory_observer(callback):
    _oom_observers.append(callback)
