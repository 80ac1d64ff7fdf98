"""torchtop agent: publishes PyTorch caching-allocator statistics to torchtop.

Usage::

    import torchtop_agent
    torchtop_agent.start()      # once, anywhere; safe to call again
    ...
    torchtop_agent.step()       # optional, once per training step

The agent is a daemon thread serving protocol v1 (see agent-protocol.md) on a Unix socket
``<dir>/<pid>.sock`` (``<dir>/<pid>.<pid namespace inode>.sock`` where the live agent of a process
with the same pid in another PID namespace, a container sharing the directory, holds that name).
It never removes a socket something listens on, and at exit removes only the one it bound. It
uses only the standard library, never imports torch (it reads ``sys.modules``), and never
initializes CUDA: statistics are read only once the program itself has initialized CUDA.

Wake-ups: with no monitor connected the thread sleeps until one connects. While one is, stats go
out every interval; a program that calls ``step()`` has them read and sent by the first
``step()`` after each interval, on the training thread, and the agent's thread sleeps on until
the steps stop (``STEP_TICK_GRACE_INTERVALS``). ``step()`` never waits for the agent's thread.

Devices reported: once CUDA is initialized, every device index below
``torch.cuda.device_count()`` whose allocator has ever held memory in this process (reserved
bytes current or peak, or a cumulative segment/allocation count above zero). Reading a device's
statistics only reads the allocator's counters; it creates no CUDA context. A device that was
reported once stays reported, so a device emptied by ``empty_cache()`` does not vanish. The
cudaMallocAsync backend is read the same way: its statistics of a device this process has not
used are zeros, read without creating a context. (``torch.cuda.current_device()`` cannot tell
which device a rank uses: it is per thread, and reads 0 on the agent's.)

What is read and sent: only the figures torchtop reads (``SENT_STATS``), picked straight out of
``torch.cuda.memory_stats_as_nested_dict(i)``, the dict torch's C++ binding builds. The public
``memory_stats(i)`` flattens that same dict in Python into 122 dotted keys, which cost the training
process about ten times the binding itself; the agent flattens nothing. On a torch without the
nested function, or where it fails while ``memory_stats`` works, the agent reads
``memory_stats(i)`` instead and picks the same keys: the figures are the same either way.

Process life (see the "Processes" section below):

- A forked child (a DataLoader worker) closes its copies of the agent's fds and serves nothing.
  The agent uses a poll() selector, whose state is private to each process: an epoll set would be
  shared with the child, and the child's clean-up would unregister the parent's clients.
- The thread is stopped before each fork and started again after it, in the parent: the child
  never inherits a thread of ours caught in the middle of something, and Python 3.12+ has no
  reason to warn that the process is multi-threaded because of the agent.
- SIGTERM removes the socket, and the process still dies of SIGTERM. The handler is installed only
  over the default disposition and only from the main thread; a handler the program installs
  later wins. The agent's thread also watches for SIGTERM (through the signal wakeup fd, when the
  program does not use it), so SIGTERM still ends a process whose main thread is stuck in C.
- Nothing here may break the program: every exception is caught and kept in a small log, or
  answered in a reply or an event.

Memory post-mortems: the record_history command (or TORCHTOP_RECORD_HISTORY, which
`torchtop run --record-history` sets) starts torch's memory history recording, never before the
program has initialized CUDA itself (the start is queued with torch.cuda._lazy_call). A
record_history command with ``until_snapshot`` (the monitor's `S` key) records only until the
next snapshot command has written its file, and changes nothing when recording is already on
(the program's own, or the agent's lasting one). While it
records, PyTorch's OOM observer writes a snapshot `<pid>-oom-<time>.pickle` (0600, O_EXCL, the
oldest pruned over a cap) before the OutOfMemoryError is raised, and the oom event names it.
"""

import atexit
import errno
import json
import os
import pickle
import re
import selectors
import signal
import socket
import stat
import struct
import sys
import threading
import time
from collections import deque

__all__ = ["start", "step", "stop", "socket_path", "resolve_socket_dir", "started_by_multiprocessing",
           "last_error", "PROTOCOL_VERSION"]
__version__ = "0.1.0"

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 1 << 20
MIN_INTERVAL_MS = 10
MAX_INTERVAL_MS = 3_600_000
# A client that does not read its messages is dropped once this much output is queued for it.
MAX_QUEUED_BYTES = 8 << 20
# How long a fork waits for the agent's thread to stop; past it the fork goes ahead anyway.
PARK_TIMEOUT_S = 1.0
# While step() is called at least this many intervals apart, it keeps the time: the first call
# after each interval ticks on the training thread, awake anyway, and the agent's thread sleeps
# until this long after the last call. Where a thread's wake-up costs more than the tick itself
# (virtual machines) that spares most of them, and the thread still takes over within this when
# the steps stop (evaluation, a checkpoint, a hang). At the default 1 s, stats are never older
# than torchtop's "agent silent" mark of 5 s.
STEP_TICK_GRACE_INTERVALS = 3
# A tick builds the hello again only when torch was imported since, or every this many ticks (a
# rank known once torch.distributed is initialized, the environment): built cold after a training
# step, the hello is a quarter of a tick's cost.
HELLO_RECHECK_TICKS = 10

_lock = threading.Lock()
_agent = None
# The agent whose socket start() is putting in place, for a SIGTERM that comes meanwhile.
_binding = None
_fork_hook_installed = False
_exit_hook_installed = False
# Why the last start() returned None, for callers that cannot see stderr (torchtop attach).
last_error = None


def _warn(message):
    global last_error
    last_error = message
    try:
        sys.stderr.write("torchtop_agent: %s\n" % message)
        sys.stderr.flush()
    except Exception:
        pass


def resolve_socket_dir(environ=None, uid=None):
    """Where sockets live: $TORCHTOP_AGENT_DIR, else $XDG_RUNTIME_DIR/torchtop, else /tmp/torchtop-<uid>."""
    environ = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    explicit = environ.get("TORCHTOP_AGENT_DIR")
    if explicit:
        return explicit
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "torchtop")
    return "/tmp/torchtop-%d" % uid


def _prepare_dir(path):
    """Create the socket directory 0700, or check an existing one. Returns an error sentence or None."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mkdir(path, 0o700)
        except OSError as e:
            return "cannot create %s: %s" % (path, e)
    except OSError as e:
        return "cannot create %s: %s" % (path, e)
    try:
        st = os.lstat(path)
    except OSError as e:
        return "cannot inspect %s: %s" % (path, e)
    if stat.S_ISLNK(st.st_mode):
        return "%s is a symlink; refusing to use it" % path
    if not stat.S_ISDIR(st.st_mode):
        return "%s is not a directory" % path
    if st.st_uid != os.getuid():
        return "%s is owned by uid %d, not by us (uid %d)" % (path, st.st_uid, os.getuid())
    if st.st_mode & 0o077:
        return "%s has mode %o; it must be accessible by its owner only (0700)" % (
            path, stat.S_IMODE(st.st_mode))
    return None


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


# The `-c` code that multiprocessing (and its fork `multiprocess`) gives the interpreters it starts
# for itself: spawn and forkserver workers, the forkserver, the resource (semaphore) tracker.
_MULTIPROCESSING_CHILD = re.compile(
    r"\s*from multiprocess(ing)?\.(spawn|forkserver|resource_tracker|semaphore_tracker) import ")


def _command_line():
    argv = getattr(sys, "orig_argv", None)  # Python 3.10+
    if argv:
        return list(argv)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0")[:-1]]


def _dash_c_code(argv):
    """The code of `python ... -c CODE`, or None when the interpreter runs a script or module."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-c":
            return next(args, None)
        if arg.startswith("-c"):
            return arg[2:]
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            next(args, None)
        elif arg == "-m" or arg == "-" or not arg.startswith("-"):
            return None
    return None


def started_by_multiprocessing(argv=None):
    """True in an interpreter that multiprocessing started for its own use.

    That is a spawn or forkserver worker (a spawn-context DataLoader worker, a Pool worker), the
    forkserver, or the resource tracker. They are told apart by their command line, which is known
    before any of the program runs (multiprocessing.parent_process() is not set up yet when
    sitecustomize runs). Forked children never run sitecustomize at all. A program that a launcher
    starts as a plain subprocess (a torchrun rank) is not one of them.
    """
    try:
        code = _dash_c_code(_command_line() if argv is None else list(argv))
        return code is not None and _MULTIPROCESSING_CHILD.match(code) is not None
    except Exception:
        return False


def _importing_main_for_multiprocessing():
    """True while a spawn or forkserver child imports the main module again: multiprocessing
    marks that phase with `_inheriting` on the current process (Python 3.4 and later)."""
    mp_process = sys.modules.get("multiprocessing.process")
    try:
        current = mp_process.current_process() if mp_process is not None else None
        return bool(getattr(current, "_inheriting", False))
    except Exception:
        return False


def _torch():
    return sys.modules.get("torch")


def _cuda_ready(torch):
    """True only when the program itself has initialized CUDA; never initializes it."""
    try:
        cuda = getattr(torch, "cuda", None)
        return cuda is not None and bool(cuda.is_initialized())
    except Exception:
        return False


def _cuda_initializing(torch):
    """Whether some thread is inside torch.cuda._lazy_init now (it holds the lock that
    _lazy_call takes). A torch without that lock has nothing to wait for; an error counts as
    yes: the caller then hands its call to the agent's thread, which may wait where the program
    must not."""
    try:
        lock = getattr(torch.cuda, "_initialization_lock", None)
        return lock is not None and bool(lock.locked())
    except Exception:
        return True


def _argv():
    try:
        return [str(a) for a in sys.argv]
    except Exception:  # a launcher left something odd in sys.argv
        return []


def _wait_until_thread_gone(thread):
    """Thread.join() can return before the OS thread has exited (3.12 and earlier), and the
    fork warning counts OS threads: wait briefly for the kernel to drop it."""
    tid = getattr(thread, "native_id", None)
    if tid is None:
        return
    path = "/proc/self/task/%d" % tid
    deadline = time.monotonic() + 0.1
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.0002)


# The memory_stats keys torchtop reads (STAT_KEYS in src/protocol/mod.rs); a device's stats carry
# only these. tests/python/test_agent_stats.py keeps the two lists equal.
SENT_STATS = (
    "allocated_bytes.all.current",
    "reserved_bytes.all.current",
    "active_bytes.all.current",
    "inactive_split_bytes.all.current",
    "requested_bytes.all.current",
    "allocated_bytes.all.peak",
    "segment.all.current",
    "num_alloc_retries",
    "num_ooms",
    "reserved_bytes.all.peak",
    "reserved_bytes.large_pool.current",
    "reserved_bytes.small_pool.current",
    "allocation.all.allocated",
    "allocation.all.freed",
    "oversize_allocations.current",
    "oversize_segments.current",
    "max_split_size",
)
# Read for the agent's own use (whether a device was ever used), never sent.
_OWN_STATS = ("segment.all.allocated", "num_device_alloc")
# Each key read, with its path in the nested dict.
_READ = tuple((key, tuple(key.split("."))) for key in SENT_STATS + _OWN_STATS)
_INF = float("inf")


def _figure(value):
    """The value as a figure JSON carries exactly (an int, or a finite float), else None."""
    kind = value.__class__
    if kind is int:  # what torch gives: checked first, it is nearly every call
        return value
    if kind is bool:
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and -_INF < value < _INF:
        return float(value)
    return None


def _pick_nested(nested):
    """The keys of _READ out of memory_stats_as_nested_dict's dict, flattening nothing else. An
    entry that is missing, or not a number, is left out: the monitor shows it as N/A."""
    out = {}
    for key, path in _READ:
        node = nested
        try:
            for part in path:
                node = node[part]
        except Exception:  # a level that is missing, or not a dict
            continue
        value = _figure(node)
        if value is not None:
            out[key] = value
    return out


def _pick_flat(flat):
    """The keys of _READ out of memory_stats' flat dict, with the same rules."""
    out = {}
    for key, _path in _READ:
        value = flat.get(key)
        if value is not None:
            value = _figure(value)
            if value is not None:
                out[key] = value
    return out


def _figures(raw, pick):
    """The figures in what torch returned: None when it had none ({} before CUDA is initialized),
    {} when it is not a dict at all."""
    if isinstance(raw, dict):
        return pick(raw) if raw else None
    return {}


# One encoder for every message: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


def _encode(message):
    """One line of the protocol."""
    return (_ENCODER.encode(message) + "\n").encode("utf-8")


def _ever_used(stats):
    for key in ("reserved_bytes.all.current", "reserved_bytes.all.peak",
                "segment.all.allocated", "allocation.all.allocated",
                "allocated_bytes.all.peak", "num_device_alloc"):
        value = stats.get(key)
        if isinstance(value, (int, float)) and value > 0:
            return True
    return False


def _pid_namespace():
    """The inode of this process's PID namespace, or None where /proc cannot tell."""
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    match = re.fullmatch(r"pid:\[([1-9][0-9]{0,19})\]", link)
    return int(match.group(1)) if match else None


def _socket_names(path, pid_ns):
    """The names to serve under, most wanted first (``path``, ``<pid>.sock``; then
    ``<pid>.<pid_ns>.sock``), and the staging name to bind under: ``<pid>.<pid_ns>.sock.new``,
    unique among live processes, so that no agent takes another's for a leftover."""
    if pid_ns is None:
        return [path], path + ".new"
    tagged = "%s.%d.sock" % (path[:-len(".sock")], pid_ns)
    return [path, tagged], tagged + ".new"


def _listened(path):
    """Whether something listens on the socket at ``path``. Only a refused connection says
    not: a full backlog, or an error that tells nothing, counts as a live listener's."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.setblocking(False)
        probe.connect(path)
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True
    finally:
        probe.close()


def _make_room(path):
    """Removes a stale socket of ours at ``path`` (left by an earlier process that had our pid,
    one that nothing listens on). Returns False when a live listener holds the name. Anything
    else there is left alone: the link (or bind) into its place then fails."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if not (stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid()):
        return True
    if _listened(path):
        return False
    try:
        again = os.lstat(path)
        # Still the socket found refused, not one another agent has put there since.
        if (again.st_dev, again.st_ino) == (st.st_dev, st.st_ino):
            os.unlink(path)
    except FileNotFoundError:
        pass
    return True


def _put_in_place(staging, names):
    """Gives the socket bound at ``staging`` the first of ``names`` that no live listener holds,
    and returns it. A link, unlike a rename, never replaces what is at a name: a file there that
    is not a stale socket of ours is left alone, as a bind there would have failed."""
    for i, path in enumerate(names):
        last = i == len(names) - 1
        if not _make_room(path):
            if last:
                raise OSError(errno.EADDRINUSE, "the agent of another process of our pid (in "
                              "another PID namespace) listens on %s" % " and on ".join(names))
            continue
        try:
            os.link(staging, path)
        except FileExistsError:
            # Another agent of our pid took it since: the next name, if it is live.
            if last or not _listened(path):
                raise
            continue
        except OSError:  # a filesystem that makes no links
            if os.path.lexists(path):
                raise
            os.rename(staging, path)
            return path
        os.unlink(staging)
        return path
    raise OSError(errno.EINVAL, "no socket name to serve under")


class _Client:
    __slots__ = ("sock", "inbuf", "outbuf", "writing")

    def __init__(self, sock):
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.writing = False


class _BadInput(Exception):
    pass


class _Agent:
    def __init__(self, path, interval_ms):
        self.path = path
        self.dir = os.path.dirname(path)
        self.pid = os.getpid()
        self.interval_ms = interval_ms
        self.seq = 0
        self.step_count = None
        self.last_step_at = None
        self.step_times = deque(maxlen=50)
        self.used_devices = set()
        # Set once torch's memory_stats_as_nested_dict failed where memory_stats worked.
        self.flat_stats_only = False
        self.device_uuids = {}
        self.seen_ooms = {}
        self.pending_events = deque(maxlen=100)
        self.oom_observer_attached = False
        self.observer_lock = threading.Lock()
        self.observer_fired = set()
        # The latest oom event, sent again to each monitor that connects later.
        self.last_oom = None
        self.history = _History(self)
        self.hello_facts = None
        self.hello_torch = None  # sys.modules["torch"] (or None) when hello_facts were built
        self.ticks_since_hello = 0
        self.log = deque(maxlen=50)
        self.clients = {}
        self.stopping = False
        self.parked = False  # set while a fork is under way: the thread leaves its loop
        self.failed = False
        # poll() keeps no state in the kernel. An epoll set would be shared with every forked
        # child, and a child closing its copies could unregister the parent's clients from it.
        self.selector = selectors.PollSelector() if hasattr(selectors, "PollSelector") else selectors.DefaultSelector()
        self.listener = None
        # The device and inode of the socket file bound, so that exit removes only that one.
        self.bound_id = None
        self.names = []  # every name it may have while it is put in place
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.thread = None
        # Held by whichever thread runs the loop: a thread that could not be stopped in time
        # for a fork keeps the loop, and the one started after the fork then leaves.
        self.loop_lock = threading.Lock()
        self.next_tick = time.monotonic()
        # Held while the clients and the selector change: by the thread outside its select(),
        # and by a tick from step(), which never waits for it.
        self.io_lock = threading.Lock()
        self.step_tick_ns = 0  # the training thread's CPU time in those ticks (for benchmarks)
        # Work for this thread that another thread could not do safely (queueing a call with
        # torch.cuda._lazy_call while CUDA initializes): run before the next select().
        self.handed_over = deque(maxlen=8)

    # ---- lifecycle -------------------------------------------------------------------------
    def bind(self):
        """Listens on ``<pid>.sock``, or on ``<pid>.<pid namespace inode>.sock`` where the live
        agent of another PID namespace (a container sharing the directory, whose process has our
        pid there) holds the first. A socket something listens on is never removed: that agent
        vanished from every monitor, and removed ours in turn at its exit."""
        names, staging = _socket_names(self.path, _pid_namespace())
        # Bound and listening under a name torchtop does not take for an agent's, then linked
        # into place: a monitor that lists the directory between bind() and listen() was
        # refused, and waited seconds to try again (a `torchtop --once` never did).
        if len(os.fsencode(staging)) >= 108:  # sun_path: bind the name itself, as before
            staging = None
            names = names[:1]
        if staging is not None:
            # Left by an earlier process of our pid and namespace, which no live process shares.
            _unlink_quietly(staging)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if staging is None:
                _make_room(names[0])
                listener.bind(names[0])
            else:
                listener.bind(staging)
            bound = staging or names[0]
            # The directory is 0700 already; the chmod closes the socket itself too.
            os.chmod(bound, 0o600)
            st = os.lstat(bound)
            listener.listen(16)
            listener.setblocking(False)
            # Known before the socket is put in place, so that a SIGTERM as soon as a launcher
            # can find it removes it under whichever name it has by then.
            self.bound_id = (st.st_dev, st.st_ino)
            self.names = [bound] + [n for n in names if n != bound]
            self.path = names[0] if staging is None else _put_in_place(staging, names)
        except Exception:
            listener.close()
            if staging is not None:
                _unlink_quietly(staging)
            raise
        self.dir = os.path.dirname(self.path)
        self.listener = listener
        self.selector.register(listener, selectors.EVENT_READ, "listener")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")

    def watch_signals(self, sock):
        self.selector.register(sock, selectors.EVENT_READ, "signal")

    def run_thread(self):
        thread = threading.Thread(target=self._run, name="torchtop-agent", daemon=True)
        thread.start()
        self.thread = thread

    def park(self):
        """Stops the thread, keeping every connection, so that a fork finds no thread of ours.

        Returns False when the thread did not stop within PARK_TIMEOUT_S (a long snapshot, say).
        """
        thread = self.thread
        if thread is None or not thread.is_alive():
            return True
        if thread is threading.current_thread():
            return False
        self.parked = True
        self.wake()
        thread.join(PARK_TIMEOUT_S)
        if thread.is_alive():
            return False
        _wait_until_thread_gone(thread)
        return True

    def resume(self):
        """Runs the loop again after a fork (in the parent)."""
        self.parked = False
        if not self.stopping and not self.failed:
            self.run_thread()

    def unlink_socket(self):
        """Removes the socket this process bound, only while the file at its path is that very
        socket: once gone, the path may be another agent's (a process of our pid in another PID
        namespace), and removing that one made it vanish from every monitor."""
        if os.getpid() != self.pid or self.bound_id is None:
            return
        # While it is put in place, the socket may be under its staging name or a later one.
        for path in dict.fromkeys([self.path] + self.names):
            try:
                st = os.lstat(path)
                if stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self.bound_id:
                    os.unlink(path)
            except OSError:
                pass

    def abandon(self):
        """In a forked child: close the copies of our fds, and change nothing that the parent
        shares (the listener, the clients' connections, the socket file)."""
        self.stopping = True
        socks = [c.sock for c in self.clients.values()] + [self.listener, self.wake_r, self.wake_w]
        self.clients = {}
        for sock in socks:
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass

    def wake(self):
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass

    def on_agent_thread(self):
        return self.thread is not None and self.thread is threading.current_thread()

    def hand_over(self, fn):
        """Runs ``fn`` on the agent's thread, soon."""
        if fn not in self.handed_over:
            self.handed_over.append(fn)
        self.wake()

    def shutdown(self, unlink):
        self.stopping = True
        self.wake()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=2.0)
        self.close_all(unlink)

    def close_all(self, unlink):
        # Removed while it still listens: a socket nothing listens on is stale to another agent
        # of our pid, which may take its name between our check and our unlink.
        if unlink:
            self.unlink_socket()
        # A tick from step() on another thread may be sending: let it end, but never let an exit
        # wait on it for long.
        locked = self.io_lock.acquire(timeout=1.0)
        try:
            for client in list(self.clients.values()):
                self._close_client(client, None)
        finally:
            if locked:
                self.io_lock.release()
        for s in (self.listener, self.wake_r, self.wake_w):
            try:
                if s is not None:
                    s.close()
            except OSError:
                pass
        try:
            self.selector.close()
        except Exception:
            pass

    # ---- main loop -------------------------------------------------------------------------
    def _run(self):
        try:
            while not (self.stopping or self.parked or self.failed):
                if not self.loop_lock.acquire(False):
                    return  # an older thread still runs the loop, and keeps it
                try:
                    self._loop()
                finally:
                    self.loop_lock.release()
        except BaseException as e:  # a daemon thread at interpreter exit, or a bug: stay quiet
            self._note("the agent's thread stopped: %r" % (e,))

    def _loop(self):
        while not (self.stopping or self.parked):
            try:
                events = self.selector.select(self._sleep_seconds(time.monotonic()))
            except (OSError, ValueError) as e:
                self.failed = True
                self._note("select failed: %r" % (e,))
                return
            while self.handed_over:
                self._guarded(self.handed_over.popleft())
            with self.io_lock:
                for key, mask in events:
                    self._guarded(self._dispatch, key, mask)
                if self.pending_events:
                    self._guarded(self._flush_events)
                now = time.monotonic()
                # Overdue: step() is called but could not tick (this thread held the clients).
                overdue = now >= self.next_tick + self.interval_ms / 1000.0
                if now >= self.next_tick and (overdue or not self._steps_keep_time(now)):
                    self.next_tick = now + self.interval_ms / 1000.0
                    if self.clients:
                        self._guarded(self._tick)

    def _sleep_seconds(self, now):
        """How long the thread may sleep: until the next tick, or past it while step() keeps
        the time; with no monitor connected, until something happens (a connection, a wake)."""
        if not self.clients:
            return None
        deadline = self.next_tick
        if self._steps_keep_time(now):
            deadline = max(deadline, self.last_step_at + self._grace_seconds())
        return max(0.0, deadline - now)

    def _grace_seconds(self):
        return STEP_TICK_GRACE_INTERVALS * self.interval_ms / 1000.0

    def _steps_keep_time(self, now):
        """Whether step() was called within the grace: then its next call ticks, and this
        thread leaves the ticks to it (were it to tick at each deadline itself, it would win the
        race with a step that comes a moment later every time)."""
        last = self.last_step_at
        return last is not None and now - last < self._grace_seconds()

    def tick_from_step(self, now):
        """The tick, on the calling (training) thread, when one is due and a monitor listens.
        Never waits: while the thread holds the clients (a command, a snapshot being written),
        the tick is left to it."""
        if (now < self.next_tick or not self.clients or self.stopping or self.parked or self.failed
                or os.getpid() != self.pid or not self.io_lock.acquire(False)):
            return
        try:
            if now < self.next_tick:
                return  # the thread ticked in between
            started = time.thread_time_ns()
            self.next_tick = now + self.interval_ms / 1000.0
            self._guarded(self._tick)
            if self.pending_events:
                self._guarded(self._flush_events)
            if any(client.outbuf for client in self.clients.values()):
                self.wake()  # a monitor's socket is full: the thread waits until it can write
            self.step_tick_ns += time.thread_time_ns() - started
        finally:
            self.io_lock.release()

    def _guarded(self, fn, *args):
        try:
            fn(*args)
        except Exception as e:  # never let one event, one tick or torch kill the agent
            self._note("internal error in %s: %r" % (getattr(fn, "__name__", "?"), e))

    def _note(self, message):
        try:
            self.log.append(message)
        except Exception:
            pass

    def _dispatch(self, key, mask):
        if key.data == "listener":
            self._accept()
        elif key.data == "wake":
            try:
                while self.wake_r.recv(4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        elif key.data == "signal":
            _read_signal_wakeups(key.fileobj)
        else:
            client = key.data
            if mask & selectors.EVENT_READ:
                self._read(client)
            if mask & selectors.EVENT_WRITE and self._alive(client):
                self._write(client)

    def _accept(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.log.append("accept failed: %s" % e)
                return
            if not self._peer_allowed(sock):
                sock.close()
                continue
            sock.setblocking(False)
            client = _Client(sock)
            self.clients[sock.fileno()] = client
            self.selector.register(sock, selectors.EVENT_READ, client)
            self._guarded(self._greet, client)

    def _greet(self, client):
        if len(self.clients) == 1:
            # The thread slept with no monitor connected; the next stats are an interval away.
            self.next_tick = time.monotonic() + self.interval_ms / 1000.0
        hello = self._remember_hello()
        if hello != self.hello_facts:
            # The monitors connected earlier learn the new facts too (torch imported since).
            self.hello_facts = hello
            self._broadcast(hello)
        else:
            self._send(client, hello)
        # Before the stats: a monitor that waits for stats has then read the OOM too.
        last_oom = self.last_oom
        if last_oom is not None:
            self._send(client, last_oom)
        self._send(client, self._stats())

    def _peer_allowed(self, sock):
        opt = getattr(socket, "SO_PEERCRED", None)
        if opt is None:
            return True
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
        except OSError:
            return False
        if uid in (os.getuid(), 0):
            return True
        self.log.append("refused a peer of uid %d" % uid)
        return False

    def _read(self, client):
        try:
            data = client.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close_client(client, "read failed: %s" % e)
            return
        if not data:
            self._close_client(client, None)
            return
        client.inbuf += data
        try:
            while True:
                newline = client.inbuf.find(b"\n")
                if newline < 0:
                    if len(client.inbuf) > MAX_LINE_BYTES:
                        raise _BadInput("line longer than %d bytes" % MAX_LINE_BYTES)
                    return
                if newline > MAX_LINE_BYTES:
                    raise _BadInput("line longer than %d bytes" % MAX_LINE_BYTES)
                line = bytes(client.inbuf[:newline])
                del client.inbuf[:newline + 1]
                if line.strip():
                    self._handle_line(client, line)
                if not self._alive(client):
                    return
        except _BadInput as e:
            self._close_client(client, "dropped a client: %s" % e)

    def _handle_line(self, client, line):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise _BadInput("not UTF-8")
        try:
            msg = json.loads(text)
        except ValueError:
            raise _BadInput("not JSON")
        if not isinstance(msg, dict):
            raise _BadInput("not a JSON object")
        if msg.get("v") != PROTOCOL_VERSION or isinstance(msg.get("v"), bool):
            raise _BadInput("protocol version %r, expected %d" % (msg.get("v"), PROTOCOL_VERSION))
        if msg.get("type") != "cmd":
            return  # unknown types are ignored
        cmd_id = msg.get("id")
        if not isinstance(cmd_id, int) or isinstance(cmd_id, bool):
            raise _BadInput("command without an integer id")
        self._send(client, self._run_command(cmd_id, msg))

    def _write(self, client):
        try:
            sent = client.sock.send(client.outbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close_client(client, "write failed: %s" % e)
            return
        del client.outbuf[:sent]
        self._update_interest(client)

    def _send(self, client, message):
        self._send_line(client, _encode(message))

    def _send_line(self, client, data):
        if not self._alive(client):
            return
        if len(client.outbuf) + len(data) > MAX_QUEUED_BYTES:
            self._close_client(client, "dropped a client that does not read")
            return
        client.outbuf += data
        self._write(client)

    def _update_interest(self, client):
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.outbuf else 0)
        writing = bool(client.outbuf)
        if writing != client.writing:
            client.writing = writing
            try:
                self.selector.modify(client.sock, want, client)
            except (KeyError, ValueError, OSError):
                pass

    def _alive(self, client):
        return self.clients.get(client.sock.fileno()) is client

    def _close_client(self, client, reason):
        if reason:
            self.log.append(reason)
        fd = client.sock.fileno()
        self.clients.pop(fd, None)
        try:
            self.selector.unregister(client.sock)
        except (KeyError, ValueError, OSError):
            pass
        try:
            client.sock.close()
        except OSError:
            pass

    def _broadcast(self, message):
        data = _encode(message)  # once, whatever the number of monitors
        for client in list(self.clients.values()):
            self._send_line(client, data)

    # ---- messages --------------------------------------------------------------------------
    def _hello(self):
        torch = _torch()
        rank, local_rank, world_size = _env_int("RANK"), _env_int("LOCAL_RANK"), _env_int("WORLD_SIZE")
        if torch is not None and rank is None:
            try:
                dist = getattr(torch, "distributed", None)
                if dist is not None and dist.is_available() and dist.is_initialized():
                    rank, world_size = dist.get_rank(), dist.get_world_size()
            except Exception:
                pass
        return {
            "v": PROTOCOL_VERSION,
            "type": "hello",
            "pid": os.getpid(),
            "argv": _argv(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "torch": getattr(torch, "__version__", None) if torch is not None else None,
            "rank": rank,
            "local_rank": local_rank,
            "world_size": world_size,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF")),
            # Which physical GPU each cuda:N is (torchtop maps N through this list).
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "interval_ms": self.interval_ms,
            "agent": __version__,
        }

    def _device_stats(self):
        torch = _torch()
        if torch is None or not _cuda_ready(torch):
            return []
        self._attach_oom_observer(torch)
        self._guarded(self.history.tick, torch)
        try:
            count = int(torch.cuda.device_count())
        except Exception:
            return []
        devices = []
        # Every device, whatever the allocator backend: cudaMallocAsync's getDeviceStats returns
        # zeros for a device without a pool yet (no context created), which _ever_used skips.
        for index in range(count):
            try:
                stats = self._read_figures(torch.cuda, index)
            except Exception:  # a torch that fails on this device: skip it this time
                continue
            if stats is None or (index not in self.used_devices and not _ever_used(stats)):
                continue
            self.used_devices.add(index)
            for key in _OWN_STATS:
                stats.pop(key, None)
            entry = {"index": index, "stats": stats}
            uuid = self._device_uuid(torch, index)
            if uuid is not None:
                entry["uuid"] = uuid
            devices.append(entry)
        return devices

    def _read_figures(self, cuda, index):
        """The figures of SENT_STATS and _OWN_STATS for one device (see _figures), from the
        nested dict when this torch has one that works, else from memory_stats."""
        nested = None if self.flat_stats_only else getattr(cuda, "memory_stats_as_nested_dict", None)
        if nested is None:
            return _figures(cuda.memory_stats(index), _pick_flat)
        try:
            return _figures(nested(index), _pick_nested)
        except Exception as e:
            figures = _figures(cuda.memory_stats(index), _pick_flat)  # raises when both fail
            self.flat_stats_only = True
            self._note("memory_stats_as_nested_dict failed where memory_stats works; reading "
                       "memory_stats from now on: %r" % (e,))
            return figures

    def _device_uuid(self, torch, index):
        """The UUID of a device the process uses, asked once: it names the physical GPU even
        when CUDA_VISIBLE_DEVICES renumbers them. Only devices already in use are asked, so no
        context is created anywhere new."""
        if index not in self.device_uuids:
            uuid = None
            try:
                props = getattr(torch.cuda, "get_device_properties", None)
                value = getattr(props(index), "uuid", None) if props is not None else None
                uuid = str(value) if value is not None else None
            except Exception:
                uuid = None
            self.device_uuids[index] = uuid
        return self.device_uuids[index]

    def _stats(self):
        self.seq += 1
        devices = self._device_stats()
        with _lock:
            step = self.step_count
            times = list(self.step_times)
        message = {
            "v": PROTOCOL_VERSION,
            "type": "stats",
            "seq": self.seq,
            "ts": time.time(),
            "step": step,
            "step_time_s": (sum(times) / len(times)) if times else None,
            "interval_ms": self.interval_ms,
            "devices": devices,
        }
        self._guarded(self._note_oom_counters, devices)
        return message

    def _tick(self):
        self.ticks_since_hello += 1
        if _torch() is not self.hello_torch or self.ticks_since_hello >= HELLO_RECHECK_TICKS:
            hello = self._remember_hello()
            if hello != self.hello_facts:
                # Facts changed since connect (torch imported, rank known): say hello again.
                self.hello_facts = hello
                self._broadcast(hello)
        self._broadcast(self._stats())

    def _remember_hello(self):
        self.hello_torch, self.ticks_since_hello = _torch(), 0
        return self._hello()

    def _note_oom_counters(self, devices):
        for device in devices:
            index = device["index"]
            count = device["stats"].get("num_ooms")
            if not isinstance(count, int):
                continue
            before = self.seen_ooms.get(index)
            self.seen_ooms[index] = count
            if before is None:
                # An OOM the observer saw before this first reading is in the count already.
                self.observer_fired.discard(index)
            elif count > before:
                if index in self.observer_fired:
                    self.observer_fired.discard(index)
                    continue
                self._queue_event({
                    "v": PROTOCOL_VERSION, "type": "event", "kind": "oom", "ts": time.time(),
                    "device": index, "num_ooms": count, "source": "num_ooms",
                    "step": self.step_count})

    def arm_oom_observer(self):
        """Attaches the OOM observer as soon as the program has initialized CUDA (torch's
        allocator has no devices to attach it to before), whether or not a monitor is connected:
        attached at the first stats reading only, it missed the most common OOM, the first
        allocations of a model too big for its GPU, and the counter then read 1 from the start,
        never rising. Before `import torch`, the import hook arms it once torch is imported."""
        torch = _torch()
        if torch is None:
            _watch_torch_import(self._arm_after_import)
            return
        if _cuda_ready(torch):
            self._attach_oom_observer(torch)
            return
        # Without torch.cuda._lazy_call, the first stats reading attaches it, as before.
        self.after_cuda_init(torch, self._attach_oom_observer_now, again=self.arm_oom_observer)

    def _attach_oom_observer_now(self):
        self._attach_oom_observer(_torch())

    def after_cuda_init(self, torch, call, again):
        """Has torch run ``call`` right after the program's CUDA initialization
        (torch.cuda._lazy_call), in this process only and never raising into torch, where an
        exception reaches the program as a DeferredCudaCallError. From a thread that may be the
        one initializing, ``again`` goes to the agent's thread instead: _lazy_call takes the lock
        _lazy_init holds (torch 2.7 on), and `torchtop attach` runs the agent's start at any
        bytecode boundary of the main thread, so queued from there the program would wait for
        good, where the agent's thread only waits the initialization out. True when queued."""
        lazy_call = getattr(getattr(torch, "cuda", None), "_lazy_call", None)
        if lazy_call is None:
            return False
        if _cuda_initializing(torch) and not self.on_agent_thread():
            self.hand_over(again)
            return False
        agent, pid = self, os.getpid()

        def after_cuda_init():
            try:
                if os.getpid() == pid and not agent.stopping:
                    call()
            except Exception:
                pass

        # Named after what it runs: torch's queue (and a test) can tell which is which.
        after_cuda_init.__name__ = "after_cuda_init_" + getattr(call, "__name__", "call")
        lazy_call(after_cuda_init)
        return True

    def _arm_after_import(self):
        if _torch() is not None and not self.stopping:
            self.arm_oom_observer()

    def _attach_oom_observer(self, torch):
        with self.observer_lock:
            if self.oom_observer_attached:
                return
            self.oom_observer_attached = True
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return
        agent = self

        # PyTorch calls observers on the allocating thread, after releasing the allocator's
        # lock and before raising OutOfMemoryError: the one moment a snapshot still shows what
        # filled the device. Nothing may escape from here into the program's allocation.
        def observer(device, alloc, device_allocated, device_free):
            try:
                agent._on_oom(device, alloc, device_allocated, device_free)
            except Exception:
                pass

        try:
            attach(observer)
        except Exception as e:
            self._note("could not attach the OOM observer: %r" % (e,))

    def _on_oom(self, device, alloc, device_allocated, device_free):
        self.observer_fired.add(device)
        event = {"v": PROTOCOL_VERSION, "type": "event", "kind": "oom", "ts": time.time(),
                 "device": device, "requested_bytes": alloc, "device_allocated": device_allocated,
                 "device_free": device_free, "source": "observer",
                 # The step() count now: a count that moves on later says the program caught
                 # the error (a plain int read; the observer must not take the agent's lock).
                 "step": self.step_count}
        if self.history.recording():
            try:
                event["path"], event["bytes"] = self._dump("oom", _torch().cuda.memory._snapshot())
                _prune_oom_files(self.dir, event["path"])
            except Exception as e:
                event["path"] = None
                event["error"] = "the OOM snapshot was not written: %s" % (str(e) or type(e).__name__)
        self._queue_event(event)

    def _queue_event(self, event):
        self.last_oom = event
        self.pending_events.append(event)
        self.wake()

    def _flush_events(self):
        while self.pending_events:
            event = self.pending_events.popleft()
            self._broadcast(event)

    # ---- commands --------------------------------------------------------------------------
    def _run_command(self, cmd_id, msg):
        cmd = msg.get("cmd")
        reply = {"v": PROTOCOL_VERSION, "type": "reply", "id": cmd_id, "cmd": cmd}
        try:
            if cmd == "set_interval":
                ms = msg.get("ms")
                if not isinstance(ms, int) or isinstance(ms, bool) or not MIN_INTERVAL_MS <= ms <= MAX_INTERVAL_MS:
                    raise ValueError("ms must be an integer from %d to %d" % (MIN_INTERVAL_MS, MAX_INTERVAL_MS))
                self.interval_ms = ms
                self.next_tick = min(self.next_tick, time.monotonic() + ms / 1000.0)
                reply.update(ok=True, interval_ms=ms)
            elif cmd == "reset_peak":
                reply.update(ok=True, devices=self._reset_peak())
            elif cmd == "snapshot":
                path, size = self._snapshot()
                reply.update(ok=True, path=path, bytes=size)
            elif cmd == "record_history":
                reply.update(ok=True, **self.history.command(msg))
            else:
                raise ValueError("unknown command %r" % (cmd,))
        except Exception as e:
            reply.update(ok=False, error=str(e) or type(e).__name__)
        return reply

    def _require_cuda(self):
        torch = _torch()
        if torch is None:
            raise RuntimeError("torch is not imported in this process")
        if not _cuda_ready(torch):
            raise RuntimeError("CUDA is not initialized in this process")
        return torch

    def _reset_peak(self):
        torch = self._require_cuda()
        self._device_stats()
        done = []
        for index in sorted(self.used_devices):
            torch.cuda.reset_peak_memory_stats(index)
            done.append(index)
        return done

    def _snapshot(self):
        torch = self._require_cuda()
        try:
            return self._dump("snapshot", torch.cuda.memory._snapshot())
        finally:
            # Recording started only for this snapshot stops, written or not: left on, every
            # allocation of the program would pay for its stack capture.
            self._guarded(self.history.end_for_snapshot)

    def _dump(self, kind, snapshot):
        """Pickles a snapshot into a new 0600 file `<pid>-<kind>-<time>[-n].pickle` beside the
        socket; an existing file is never overwritten. Returns (path, size)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = os.path.join(self.dir, "%d-%s-%s" % (os.getpid(), kind, stamp))
        for attempt in range(100):
            path = "%s%s.pickle" % (base, "" if attempt == 0 else "-%d" % attempt)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                break
            except FileExistsError:
                continue
        else:
            raise RuntimeError("could not create a snapshot file beside %s" % self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(snapshot, f, protocol=4)
                size = f.tell()
        except BaseException:
            _unlink_quietly(path)  # a half-written pickle helps nobody
            raise
        return path, size


# ---- memory history and OOM snapshots --------------------------------------------------------
HISTORY_ENABLED = ("all", "state")
HISTORY_STACKS = ("python", "all")
HISTORY_CONTEXTS = ("state", "alloc", "all", None)
# Recent torch versions keep an unbounded history by default; each entry costs a few KB.
DEFAULT_MAX_ENTRIES = 100000
MAX_MAX_ENTRIES = 100000000
# OOM snapshots (<pid>-oom-*.pickle) of every process in the socket directory are pruned, oldest
# first, while together they hold more than this; the newest one is always kept.
DEFAULT_OOM_KEEP_BYTES = 1 << 30
_OOM_FILE = re.compile(r"^[0-9]+-oom-[0-9-]+\.pickle$")


def _history_settings(msg, default_enabled="all"):
    """The recording asked for by a record_history command (or the environment), or None to
    stop. Raises ValueError with a sentence for a bad field."""
    enabled = msg.get("enabled", default_enabled)
    if enabled is None:
        return None
    if enabled not in HISTORY_ENABLED:
        raise ValueError("enabled must be \"all\", \"state\" or null, not %r" % (enabled,))
    max_entries = msg.get("max_entries", DEFAULT_MAX_ENTRIES)
    if (not isinstance(max_entries, int) or isinstance(max_entries, bool)
            or not 1 <= max_entries <= MAX_MAX_ENTRIES):
        raise ValueError("max_entries must be an integer from 1 to %d" % MAX_MAX_ENTRIES)
    stacks = msg.get("stacks", "python")
    if stacks not in HISTORY_STACKS:
        raise ValueError("stacks must be \"python\" or \"all\", not %r" % (stacks,))
    context = msg.get("context", "all")
    if context not in HISTORY_CONTEXTS:
        raise ValueError("context must be \"state\", \"alloc\", \"all\" or null, not %r" % (context,))
    return {"enabled": enabled, "max_entries": max_entries, "stacks": stacks, "context": context}


def _history_from_env(environ=None):
    """What `torchtop run --record-history` asks for through TORCHTOP_RECORD_HISTORY."""
    environ = os.environ if environ is None else environ
    value = environ.get("TORCHTOP_RECORD_HISTORY", "")
    if not value or value == "0":
        return None
    msg = {"enabled": "all" if value == "1" else value}
    entries = environ.get("TORCHTOP_RECORD_HISTORY_MAX_ENTRIES")
    if entries:
        msg["max_entries"] = int(entries) if entries.isdigit() else entries
    return _history_settings(msg)


class _History:
    """Memory history recording: what was asked for and what torch does.

    `_record_memory_history` initializes CUDA when it is not yet (a context on the current
    device), which the agent never does: before the program initializes CUDA, the start is
    queued with `torch.cuda._lazy_call`, which torch runs right after its CUDA initialization and
    before the first allocation. Before torch is even imported, a one-shot import hook queues it
    once `import torch` has finished.
    """

    def __init__(self, agent):
        self.agent = agent
        self.lock = threading.Lock()
        self.wanted = None  # the settings asked for, or None
        self.active = None  # the settings torch records with, or None
        self.queued = False
        # The agent started the recording in force for the next snapshot only (until_snapshot).
        self.for_snapshot = False

    def recording(self):
        return self.active is not None

    def describe(self):
        wanted = self.wanted
        out = {"enabled": None} if wanted is None else dict(wanted)
        out["recording"] = self.active is not None
        out["pending"] = wanted is not None and wanted != self.active
        out["until_snapshot"] = self.for_snapshot
        return out

    def command(self, msg):
        """The record_history command; returns the reply's fields or raises with a sentence."""
        settings = _history_settings(msg)
        torch = _torch()
        if settings is not None and msg.get("until_snapshot") is True:
            self.start_for_snapshot(settings, torch)
            return self.describe()
        with self.lock:
            self.for_snapshot = False  # a lasting request: the next snapshot leaves it on
        if torch is None and settings is not None:
            raise RuntimeError("torch is not imported in this process yet; ask again once it is, "
                               "or start it under `torchtop run --record-history`")
        self.want(settings, torch)
        return self.describe()

    def start_for_snapshot(self, settings, torch):
        """Starts recording until the next snapshot, unless it is on already: the program's own
        recording (its settings are kept) or a lasting one of the agent's. Before CUDA is
        initialized nothing is queued: the snapshot that follows would fail anyway."""
        if torch is None or not _cuda_ready(torch):
            return
        if self.wanted is not None or self.active is not None or _program_records_history(torch):
            return
        self.want(settings, torch)
        with self.lock:
            self.for_snapshot = self.active is not None

    def end_for_snapshot(self):
        """After a snapshot: stops the recording that start_for_snapshot started."""
        with self.lock:
            if not self.for_snapshot:
                return
            self.for_snapshot = False
            self.wanted = None
        self.apply()

    def want(self, settings, torch):
        with self.lock:
            self.wanted = settings
        if torch is None:
            if settings is not None:
                _watch_torch_import(self.on_torch_imported)
        elif _cuda_ready(torch):
            try:
                self.apply()
            except Exception:
                with self.lock:
                    self.wanted = self.active
                raise
        elif settings is not None:
            self.queue(torch)

    def on_torch_imported(self):
        torch = _torch()
        if torch is None or self.wanted is None:
            return
        if _cuda_ready(torch):
            self.apply_deferred()
        else:
            self.queue(torch)

    def queue(self, torch):
        """Starts recording right after the program's CUDA initialization. Without
        torch.cuda._lazy_call the agent's next stats reading starts it instead."""
        with self.lock:
            if self.queued:
                return
            self.queued = True
        queued = self.agent.after_cuda_init(torch, self.apply_deferred,
                                            again=lambda: self.queue(torch))
        if not queued:
            with self.lock:
                self.queued = False

    def apply(self):
        """Makes torch record as wanted (CUDA is initialized). True when something changed;
        raises with a sentence when torch cannot."""
        with self.lock:
            wanted, active = self.wanted, self.active
            self.queued = False
        if wanted == active:
            return False
        torch = _torch()
        record = getattr(getattr(torch.cuda, "memory", None), "_record_memory_history", None)
        if record is None:
            raise RuntimeError("this torch has no torch.cuda.memory._record_memory_history "
                               "(torch 2.1 or newer records allocation history)")
        if wanted is None:
            record(None)
        else:
            try:
                record(wanted["enabled"], context=wanted["context"], stacks=wanted["stacks"],
                       max_entries=wanted["max_entries"])
            except TypeError as e:
                raise RuntimeError("this torch's _record_memory_history does not take enabled, "
                                   "context, stacks and max_entries (torch 2.1 or newer does): %s" % e)
            self.agent._attach_oom_observer(torch)
        with self.lock:
            self.active = wanted
        return True

    def apply_deferred(self):
        """apply() where no command waits for the outcome: it goes out as an event."""
        event = {"v": PROTOCOL_VERSION, "type": "event", "kind": "record_history", "ts": time.time()}
        try:
            if not self.apply():
                return
            event.update(ok=True, **self.describe())
        except Exception as e:
            with self.lock:
                self.wanted = self.active  # do not retry what failed at every reading
            event.update(ok=False, error=str(e) or type(e).__name__)
        self.agent.pending_events.append(event)
        self.agent.wake()

    def tick(self, torch):
        """At each stats reading once CUDA is initialized: a start that no hook ran."""
        if self.wanted != self.active:
            self.apply_deferred()


class _TorchImportWatcher:
    """A sys.meta_path entry: finds torch with the finders after it, and runs its callbacks
    once `import torch` has finished executing. It never changes what is imported.

    It stays until torch has run: a probe (`importlib.util.find_spec("torch")`, as transformers,
    accelerate and lightning make when imported) asks for a spec that is then thrown away, and a
    watcher that left at the first question never saw the import that followed."""

    def __init__(self, callback):
        self.callbacks = [callback]
        self.fired = False
        self.asking = False  # a finder after us that asks sys.meta_path again

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.fired or self.asking:
            return None
        self.asking = True
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None) if finder is not self else None
                spec = find(name, path, target) if find is not None else None
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            run_module = getattr(loader, "exec_module", None)
            if run_module is None or getattr(run_module, "_torchtop_watch", None) is self:
                return spec
            watcher = self

            def exec_module(module):
                run_module(module)
                # A loader may be shared (a zip's): only torch itself ends the watch.
                if getattr(module, "__name__", None) == "torch":
                    watcher.fire()

            exec_module._torchtop_watch = self
            loader.exec_module = exec_module
            return spec
        except Exception:
            return None
        finally:
            self.asking = False

    def fire(self):
        if self.fired:
            return
        self.fired = True
        _unwatch(self)
        for callback in list(self.callbacks):
            try:
                callback()
            except Exception:
                pass


def _watch_torch_import(callback):
    for finder in sys.meta_path:
        if isinstance(finder, _TorchImportWatcher):
            if callback not in finder.callbacks:
                finder.callbacks.append(callback)
            return
    sys.meta_path.insert(0, _TorchImportWatcher(callback))


def _unwatch(watcher):
    try:
        sys.meta_path.remove(watcher)
    except ValueError:
        pass


def _program_records_history(torch):
    """Whether torch records memory history now (the program may have started it itself).
    torch._C._cuda_isHistoryEnabled asks the current device's allocator, and recording is
    switched on every device's at once; it creates no context. False where torch lacks it."""
    enabled = getattr(getattr(torch, "_C", None), "_cuda_isHistoryEnabled", None)
    if enabled is None:
        return False
    try:
        return bool(enabled())
    except Exception:
        return False


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _oom_keep_bytes():
    value = os.environ.get("TORCHTOP_OOM_KEEP_BYTES", "")
    return int(value) if value.isdigit() else DEFAULT_OOM_KEEP_BYTES


def _prune_oom_files(directory, keep):
    """Removes the oldest OOM snapshots of the directory while together they hold more than
    the cap. Only regular files of ours named like OOM snapshots; never `keep`."""
    found = []
    uid = os.getuid()
    for name in os.listdir(directory):
        if not _OOM_FILE.match(name):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            found.append((st.st_mtime, name, path, st.st_size))
    total = sum(f[3] for f in found)
    cap = _oom_keep_bytes()
    for _mtime, _name, path, size in sorted(found):
        if total <= cap:
            break
        if path != keep:
            _unlink_quietly(path)
            total -= size


# ---- SIGTERM ---------------------------------------------------------------------------------
# The signal wakeup fd: a datagram socketpair whose read end passes credentials, so that a byte
# written by a forked child (which inherits the write end until its fork hook runs) is told apart
# from one written by this process.
_wakeup = None  # (read socket, write socket) while the wakeup fd is ours


def _on_sigterm(signum, frame):
    # A handler installed after ours may call it as "the previous handler" (Lightning does). Then
    # the process was not going to die of SIGTERM, since SIG_DFL is not callable: do nothing.
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _die_of_sigterm(in_main_thread=True)
    except Exception:
        pass


def _die_of_sigterm(in_main_thread):
    """Removes the socket, then dies of SIGTERM as the default disposition would have."""
    agent = _agent if _agent is not None else _binding
    if agent is not None:
        agent.unlink_socket()
    if in_main_thread:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    elif not _default_sigterm_from_any_thread():
        return  # the main thread's handler finishes the job when it gets to run
    try:
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    except (OSError, ValueError, AttributeError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)  # in case this thread blocks SIGTERM


def _default_sigterm_from_any_thread():
    """signal.signal() works only on the main thread, which may be stuck in C (a hung collective):
    ask libc directly. Python's own record of the handler no longer matters: the process dies."""
    try:
        import ctypes

        libc_signal = ctypes.CDLL(None, use_errno=True).signal
        libc_signal.restype = ctypes.c_void_p
        libc_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        return libc_signal(int(signal.SIGTERM), None) != ctypes.c_void_p(-1).value  # SIG_ERR
    except Exception:
        return False


def _read_signal_wakeups(sock):
    """On the agent's thread: Python's C signal handler wrote the number of a signal."""
    while True:
        try:
            data, ancillary, _flags, _addr = sock.recvmsg(64, socket.CMSG_SPACE(struct.calcsize("3i")))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        sender = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                sender = struct.unpack("3i", payload[:struct.calcsize("3i")])[0]
        if (sender == os.getpid() and int(signal.SIGTERM) in data
                and signal.getsignal(signal.SIGTERM) is _on_sigterm):
            _die_of_sigterm(in_main_thread=False)


def _install_sigterm_handler():
    """Over the default disposition only, from the main thread only. Returns the socket the
    agent's thread should watch for signal wakeups, or None."""
    global _wakeup
    try:
        ours = signal.getsignal(signal.SIGTERM) is _on_sigterm  # left by a start() before
        if threading.current_thread() is not threading.main_thread():
            return _wakeup[0] if ours and _wakeup is not None else None
        if not ours:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return None  # a handler of the program's, or SIG_IGN, or one set from C: theirs
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, RuntimeError):
        return None
    if _wakeup is not None:
        return _wakeup[0]
    if not hasattr(socket, "SO_PASSCRED"):
        return None
    pair = None
    try:
        pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        pair[0].setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        for sock in pair:
            sock.setblocking(False)
        previous = signal.set_wakeup_fd(pair[1].fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError, TypeError):
        _close_all(pair or ())
        return None
    if previous != -1:  # the program listens for signals there (asyncio does): give it back
        signal.set_wakeup_fd(previous)
        _close_all(pair)
        return None
    _wakeup = pair
    return pair[0]


def _remove_sigterm_handler():
    """Undoes _install_sigterm_handler, where possible (from the main thread)."""
    global _wakeup
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError, RuntimeError):
        pass
    _release_wakeup_fd()


def _release_wakeup_fd():
    global _wakeup
    if _wakeup is None:
        return
    try:
        current = signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        return  # not the main thread: keep the fd open, Python may still write to it
    if current != _wakeup[1].fileno():
        signal.set_wakeup_fd(current)  # the program's now; ours is unused and can go
    _close_all(_wakeup)
    _wakeup = None


def _close_all(socks):
    for sock in socks:
        try:
            sock.close()
        except OSError:
            pass


# ---- fork ------------------------------------------------------------------------------------
# The thread is stopped before a fork and started again after it. Python 3.12 counts threads
# for its fork warning before the after-fork hooks run; 3.13 counts them after, so there the
# thread is started again only once os.fork() has returned, through a pending call (the public
# C API Py_AddPendingCall) that the main thread runs at its next bytecode boundary.
_fork_caller = None  # the frame that called os.fork(), while a restart waits for it to return
_fork_caller_lasti = -1
_fork_retries = 0
_pending = None  # (Py_AddPendingCall, the callback), once prepared


def _before_fork():
    global _fork_caller, _fork_caller_lasti, _fork_retries
    try:
        agent = _agent
        if agent is None or agent.pid != os.getpid():
            return
        parked = agent.park()
        _fork_caller = None
        if parked and sys.version_info >= (3, 13) and threading.current_thread() is threading.main_thread():
            if _prepare_pending_call():
                _fork_caller = sys._getframe(1)
                _fork_caller_lasti = _fork_caller.f_lasti
                _fork_retries = 0
    except Exception:
        pass


def _after_fork_in_parent():
    global _fork_caller
    try:
        agent = _agent
        if agent is None or agent.pid != os.getpid():
            return
        if _fork_caller is not None and _pending[0](_pending[1], None) == 0:
            return  # resumed from the pending call, once the fork is over
        _fork_caller = None
        agent.resume()
    except Exception:
        pass


def _after_fork_in_child():
    # The child must not serve or remove the parent's socket; it closes its copies of the fds.
    global _agent, _lock, _fork_caller
    try:
        _lock = threading.Lock()  # another thread may have held it at the fork
        _fork_caller = None
        agent = _agent
        _agent = None
        if agent is not None:
            agent.abandon()
        _remove_sigterm_handler()  # the forking thread is the child's main thread
    except Exception:
        pass


def _prepare_pending_call():
    global _pending
    if _pending is None:
        try:
            import ctypes

            proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
            add = ctypes.pythonapi.Py_AddPendingCall
            add.argtypes = [proto, ctypes.c_void_p]
            add.restype = ctypes.c_int
            _pending = (add, proto(_resume_after_fork))
        except Exception:
            _pending = False
    return bool(_pending)


def _resume_after_fork(_arg):
    """The pending call: runs on the main thread, possibly still inside another at-fork hook."""
    global _fork_caller, _fork_retries
    try:
        interrupted = sys._getframe(1)
        if _inside_fork(interrupted) and _fork_retries < 10000:
            _fork_retries += 1
            if _pending[0](_pending[1], None) == 0:
                return 0
        _fork_caller = None
        agent = _agent
        if agent is not None and agent.pid == os.getpid() and agent.parked:
            agent.resume()
    except BaseException:
        pass
    return 0


def _inside_fork(frame):
    """True while os.fork() has not returned to its caller: the caller's frame is on the stack,
    still at the call, under the frames of at-fork hooks."""
    caller = _fork_caller
    if caller is None or frame is caller:
        return False
    while frame is not None:
        if frame is caller:
            return frame.f_lasti == _fork_caller_lasti
        frame = frame.f_back
    return False


# ---- public API ------------------------------------------------------------------------------
def _at_exit():
    agent = _agent
    if agent is not None and agent.pid == os.getpid():
        stop()


def start(interval_ms=1000, socket_dir=None):
    """Start the agent thread (idempotent). Returns the socket path, or None if it cannot start.

    While multiprocessing imports the main module again in a worker it started (spawn and
    forkserver DataLoader or Pool workers run the top of train.py again) it starts nothing and
    returns None: each worker inherits RANK and would show as one more rank of the job. A call
    from the function such a process runs (a `torch.multiprocessing.spawn` rank) starts one."""
    try:
        if _importing_main_for_multiprocessing():
            return None
        return _start(interval_ms, socket_dir)
    except Exception as e:
        _warn("not started: %r" % (e,))
        return None


def _start(interval_ms, socket_dir):
    global _agent, _binding, _fork_hook_installed, _exit_hook_installed
    with _lock:
        if _agent is not None and _agent.pid == os.getpid():
            return _agent.path
        try:
            interval_ms = int(interval_ms)
        except (TypeError, ValueError):
            interval_ms = 1000
        interval_ms = min(max(interval_ms, MIN_INTERVAL_MS), MAX_INTERVAL_MS)
        directory = socket_dir or resolve_socket_dir()
        problem = _prepare_dir(directory)
        if problem:
            _warn("not started: " + problem)
            return None
        path = os.path.join(directory, "%d.sock" % os.getpid())
        if len(path.encode()) >= 108:
            _warn("not started: socket path %s is too long for a Unix socket" % path)
            return None
        agent = _Agent(path, interval_ms)
        # The handler before the socket can be found: a launcher's SIGTERM may follow at once.
        _binding = agent
        signals = _install_sigterm_handler()
        try:
            agent.bind()
        except Exception as e:
            _binding = None
            _remove_sigterm_handler()
            agent.close_all(unlink=False)
            _warn("not started: cannot listen on %s: %s" % (path, e))
            return None
        path = agent.path  # <pid>.<pid namespace>.sock where another agent holds <pid>.sock
        if not _fork_hook_installed and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                                after_in_child=_after_fork_in_child)
            _fork_hook_installed = True
        if not _exit_hook_installed:
            atexit.register(_at_exit)
            _exit_hook_installed = True
        if signals is not None:
            agent.watch_signals(signals)
        _agent = agent
        _binding = None
        try:
            agent.run_thread()
        except Exception:
            _agent = None
            agent.close_all(unlink=True)
            raise
        _record_history_from_env(agent)
        try:
            agent.arm_oom_observer()
        except Exception as e:
            _warn("the OOM observer is attached at the first stats reading instead: %r" % (e,))
        return path


def _record_history_from_env(agent):
    """`torchtop run --record-history`: recording from the program's first CUDA allocation."""
    try:
        settings = _history_from_env()
        if settings is not None:
            agent.history.want(settings, _torch())
    except Exception as e:
        _warn("memory history is not recorded: %s" % (str(e) or type(e).__name__))


def step():
    """Mark the end of a training step: feeds the step number and step time in stats. When
    stats are due and a monitor listens, they are read and sent here, on the training thread
    (once an interval: tens of µs while memory is warm), and the agent's thread sleeps on."""
    agent = _agent
    if agent is None:
        return
    now = time.monotonic()
    try:
        with _lock:
            if agent.last_step_at is not None:
                agent.step_times.append(now - agent.last_step_at)
            agent.last_step_at = now
            agent.step_count = (agent.step_count or 0) + 1
        agent.tick_from_step(now)
    except Exception:
        pass


def stop():
    """Stop the agent and remove its socket. Safe to call when not started."""
    global _agent
    try:
        with _lock:
            agent = _agent
            if agent is not None:
                # Before the agent is forgotten: a SIGTERM from here on finds no agent to
                # unlink (a Pool terminating its workers sends one as they stop).
                agent.unlink_socket()
            _agent = None
        if agent is not None and agent.pid == os.getpid():
            agent.shutdown(unlink=True)
            _remove_sigterm_handler()
    except Exception:
        pass


def socket_path():
    """The socket this process serves, or None."""
    agent = _agent
    return agent.path if agent is not None and agent.pid == os.getpid() else None
