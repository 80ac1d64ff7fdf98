"""Shared by the agent's test modules: paths, a protocol client, and helpers to run programs.

Importing it puts the agent and the stand-in torch first on sys.path, so `import torch` in a test
module gets the stand-in.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
AGENT_DIR = os.path.join(ROOT, "assets", "python")
FAKE_TORCH_DIR = os.path.join(HERE, "fake_torch")

for _path in (AGENT_DIR, FAKE_TORCH_DIR):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# Generous: only there so that a broken agent fails a test instead of hanging it. Nothing a test
# asserts depends on it (the Rust tests' PATIENCE, tests/common/ci.rs, is the same).
WAIT = 60.0


class Client:
    """A minimal protocol client: reads JSON lines, sends raw bytes."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(WAIT)
        self.sock.connect(path)
        self.buf = b""

    def read(self):
        """The next message, or None at end of stream."""
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line.decode("utf-8"))

    def read_until(self, predicate):
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            msg = self.read()
            if msg is None:
                raise AssertionError("connection closed while waiting")
            if predicate(msg):
                return msg
        raise AssertionError("no matching message within %s s" % WAIT)

    def send(self, obj_or_bytes):
        data = obj_or_bytes if isinstance(obj_or_bytes, bytes) else (json.dumps(obj_or_bytes) + "\n").encode()
        self.sock.sendall(data)

    def command(self, cmd_id, cmd, **extra):
        """Sends a command and returns its reply (stats and hellos in between are skipped)."""
        self.send(dict({"v": 1, "type": "cmd", "id": cmd_id, "cmd": cmd}, **extra))
        return self.read_until(lambda m: m["type"] == "reply" and m["id"] == cmd_id)

    def closed_by_peer(self):
        """True when the agent ends the stream (after any messages already queued)."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def clean_env(extra=None):
    env = dict(os.environ)
    for name in ("PYTHONPATH", "TORCHTOP_AGENT_DIR", "TORCHTOP_AGENT_DISABLE", "PYTHONWARNINGS"):
        env.pop(name, None)
    env.update(extra or {})
    return env


def run_python(code, env_extra=None, timeout=60, python=None, args=()):
    return subprocess.run([python or sys.executable] + list(args) + ["-c", textwrap.dedent(code)],
                          env=clean_env(env_extra), capture_output=True, text=True, timeout=timeout)


def wait_for(predicate, what):
    """Polls until predicate() is true; fails after a generous deadline."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for %s" % what)


def sockets_in(directory):
    try:
        return sorted(n for n in os.listdir(directory) if n.endswith(".sock"))
    except FileNotFoundError:
        return []


class TempDirMixin:
    def make_tmp(self):
        self.tmp = tempfile.mkdtemp(prefix="tt-agent-")
        self.dir = os.path.join(self.tmp, "sockets")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def site_env(self, extra_paths=()):
        """The environment `torchtop run` gives a program: our sitecustomize first on the path."""
        return {"PYTHONPATH": os.pathsep.join([AGENT_DIR] + list(extra_paths)),
                "TORCHTOP_AGENT_DIR": self.dir}


def other_pythons(min_version=(3, 8)):
    """Other CPython interpreters on this machine, as {(major, minor): path}.

    Looked up in $TORCHTOP_TEST_PYTHONS (paths separated by ':'), then python3.N on PATH, then
    pyenv's versions folder. Each candidate is run once to read its version.
    """
    candidates = [p for p in os.environ.get("TORCHTOP_TEST_PYTHONS", "").split(":") if p]
    for minor in range(8, 20):
        found = shutil.which("python3.%d" % minor)
        if found:
            candidates.append(found)
    pyenv = os.path.join(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv")), "versions")
    if os.path.isdir(pyenv):
        for name in sorted(os.listdir(pyenv)):
            candidates.append(os.path.join(pyenv, name, "bin", "python3"))
    found = {}
    for path in candidates:
        if not os.access(path, os.X_OK):
            continue
        try:
            out = subprocess.run([path, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=20, env=clean_env())
        except (OSError, subprocess.TimeoutExpired):
            continue
        try:
            version = tuple(int(x) for x in out.stdout.split())
        except ValueError:
            continue
        if out.returncode == 0 and len(version) == 2 and version >= min_version:
            found.setdefault(version, path)
    return found


def exit_signal(returncode):
    return signal.Signals(-returncode).name if returncode < 0 else None


def reset_fake_torch():
    import torch

    cuda = torch.cuda
    cuda._initialized = False
    cuda._used.clear()
    cuda._reads.clear()
    cuda._overrides.clear()
    cuda._peak_resets.clear()
    cuda._stats_garbage = None
    del cuda._calls[:]
    del cuda._queued_calls[:]
    del torch._C._oom_observers[:]
    cuda.memory._history = None
    del cuda.memory._history_calls[:]
    del cuda.memory._traces[:]
