"""Installed by `torchtop run`: starts the torchtop agent in every Python program it launches.

It first runs any other sitecustomize found later on sys.path, so an existing one keeps working,
then starts the agent, except in the interpreters that multiprocessing starts for itself (spawn
and forkserver workers, the forkserver, the resource tracker): their work shows up in the main
program's figures, and their sockets would only clutter the monitor. A program started as a plain
subprocess, such as a torchrun rank, gets its own agent. Nothing here may break the program: every
failure is reported on stderr and swallowed.

Another torchtop's copy of this file on the path (another version's site directory, or a copy) is
passed over, not run: each copy would otherwise chain to the other until Python's recursion limit.
Every torchtop's copy defines `_torchtop_bootstrap`, which is how they are told from a user's.
"""


def _torchtop_bootstrap():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    # The directories whose sitecustomize already runs in this interpreter. A user's
    # sitecustomize that chains on as this one does finds this one again: entered again, it only
    # chains on, past every directory already running, so the one after the user's still runs,
    # once, and the agent is started by the first entry alone.
    seen = getattr(sys, "_torchtop_sitecustomize_seen", None)
    entered_again = seen is not None
    if seen is None:
        seen = sys._torchtop_sitecustomize_seen = set()
    seen.add(here)
    # A user's sitecustomize that ran first and chained to this one is running too.
    running = getattr(sys.modules.get("sitecustomize"), "__file__", None)
    if running:
        seen.add(os.path.dirname(os.path.abspath(running)))

    def is_torchtop_bootstrap(path):
        # Non-blocking and bounded: the path may name a FIFO or a huge file.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            return b"def _torchtop_bootstrap():" in os.read(fd, 1 << 16)
        except OSError:
            return False
        finally:
            os.close(fd)

    def next_sitecustomize():
        import importlib.machinery

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) not in seen]
        while True:
            spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
            if spec is None or spec.loader is None or not spec.origin:
                return spec
            if not is_torchtop_bootstrap(spec.origin):
                return spec
            where = os.path.dirname(os.path.abspath(spec.origin))
            left = [p for p in rest if os.path.abspath(p or os.curdir) != where]
            if len(left) == len(rest):
                return None
            rest = left

    def chain_next_sitecustomize():
        import importlib.util

        spec = next_sitecustomize()
        if spec is None or spec.loader is None:
            return
        seen.add(os.path.dirname(os.path.abspath(spec.origin)))
        ours = sys.modules.get("sitecustomize")
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules["sitecustomize"] = ours
            raise

    try:
        chain_next_sitecustomize()
    except Exception:
        import traceback

        sys.stderr.write("Error in the sitecustomize that torchtop chains to:\n")
        traceback.print_exc()
    if entered_again:
        return

    if os.environ.get("TORCHTOP_AGENT_DISABLE", "").strip().lower() not in ("", "0", "false", "no"):
        return
    try:
        import torchtop_agent

        if torchtop_agent.started_by_multiprocessing():
            return
        interval = os.environ.get("TORCHTOP_AGENT_INTERVAL_MS", "1000")
        torchtop_agent.start(interval_ms=int(interval) if interval.isdigit() else 1000)
    except Exception as e:
        try:
            sys.stderr.write("torchtop: the agent did not start: %r\n" % (e,))
        except Exception:
            pass


_torchtop_bootstrap()
del _torchtop_bootstrap
