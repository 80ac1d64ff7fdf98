"""The agent's socket name when another agent shares it: processes in different PID namespaces
(containers that mount one agent directory) often have the same pid, so two agents may want the
same `<pid>.sock`. An agent never removes a socket something listens on, serves under
`<pid>.<pid namespace inode>.sock` when a live agent holds `<pid>.sock`, and at exit removes only
the socket file it bound.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import unittest

from agent_testlib import AGENT_DIR, WAIT, Client, clean_env, reset_fake_torch, run_python, wait_for

import torchtop_agent  # noqa: E402



def pid_namespace():
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


PID_NS = pid_namespace()
needs_pid_namespace = unittest.skipIf(PID_NS is None, "/proc/self/ns/pid cannot be read here")


def listening(path):
    """A socket listening at ``path``: another process's live agent, as far as the agent sees."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(4)
    return s


def answers(path):
    """Whether a connection to ``path`` is accepted (queued) by a listener."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(path)
        return True
    except OSError:
        return False
    finally:
        c.close()


class SharedNameTests(unittest.TestCase):
    def setUp(self):
        reset_fake_torch()
        self.tmp = tempfile.mkdtemp(prefix="tt-agent-sock-")
        self.dir = os.path.join(self.tmp, "sockets")
        os.mkdir(self.dir, 0o700)
        self.plain = os.path.join(self.dir, "%d.sock" % os.getpid())
        self.closing = []

    def tearDown(self):
        torchtop_agent.stop()
        for s in self.closing:
            s.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def held(self, path):
        s = listening(path)
        self.closing.append(s)
        return s

    @needs_pid_namespace
    def test_a_live_socket_at_our_name_is_left_alone_and_the_namespace_name_taken(self):
        # The first agent of this pid (in another PID namespace) listens on <pid>.sock. The
        # second removed it ("left by an earlier process that had our pid"), so the first
        # vanished from every monitor, and then removed the second's at its own exit.
        theirs = self.held(self.plain)
        path = torchtop_agent.start(interval_ms=50, socket_dir=self.dir)
        tagged = os.path.join(self.dir, "%d.%d.sock" % (os.getpid(), PID_NS))
        self.assertEqual(path, tagged)
        self.assertEqual(torchtop_agent.socket_path(), tagged)
        self.assertTrue(answers(self.plain), "the first agent's socket was removed")
        theirs.setblocking(False)
        theirs.accept()[0].close()  # what answered was the first agent itself
        c = Client(path)
        self.addCleanup(c.close)
        self.assertEqual(c.read()["type"], "hello")
        self.assertEqual(sorted(os.listdir(self.dir)),
                         sorted([os.path.basename(self.plain), os.path.basename(tagged)]))
        torchtop_agent.stop()
        self.assertFalse(os.path.exists(tagged), "its own socket is removed at stop")
        self.assertTrue(answers(self.plain), "stop removed the other agent's socket")

    def test_a_stale_socket_at_our_name_is_still_replaced(self):
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(self.plain)
        stale.close()  # nothing listens on it: a connection is refused
        path = torchtop_agent.start(interval_ms=50, socket_dir=self.dir)
        self.assertEqual(path, self.plain)
        self.assertEqual(os.listdir(self.dir), [os.path.basename(self.plain)])

    @needs_pid_namespace
    def test_with_both_names_held_it_does_not_start_and_removes_neither(self):
        tagged = os.path.join(self.dir, "%d.%d.sock" % (os.getpid(), PID_NS))
        self.held(self.plain)
        self.held(tagged)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertIsNone(torchtop_agent.start(interval_ms=50, socket_dir=self.dir))
        self.assertIn("listens on %s and on %s" % (self.plain, tagged), err.getvalue())
        self.assertTrue(answers(self.plain))
        self.assertTrue(answers(tagged))
        self.assertEqual(sorted(os.listdir(self.dir)),
                         sorted(os.path.basename(p) for p in (self.plain, tagged)))

    def test_without_a_known_namespace_a_held_name_is_left_alone(self):
        self.held(self.plain)
        real = torchtop_agent._pid_namespace
        torchtop_agent._pid_namespace = lambda: None
        try:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertIsNone(torchtop_agent.start(interval_ms=50, socket_dir=self.dir))
        finally:
            torchtop_agent._pid_namespace = real
        self.assertIn("listens on %s" % self.plain, err.getvalue())
        self.assertTrue(answers(self.plain))
        self.assertEqual(os.listdir(self.dir), [os.path.basename(self.plain)])

    def test_stop_leaves_a_socket_at_its_path_that_it_did_not_bind(self):
        path = torchtop_agent.start(interval_ms=50, socket_dir=self.dir)
        # Its socket went (moved away here, so that the new one cannot get its inode number),
        # and another agent of this pid took the name.
        os.rename(path, os.path.join(self.tmp, "gone"))
        self.held(path)
        torchtop_agent.stop()
        self.assertTrue(answers(path), "stop removed a socket it did not bind")

    @needs_pid_namespace
    def test_a_leftover_staging_name_of_ours_is_removed(self):
        staging = "%s.%d.sock.new" % (self.plain[:-len(".sock")], PID_NS)
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(staging)
        stale.close()
        self.assertEqual(torchtop_agent.start(interval_ms=50, socket_dir=self.dir), self.plain)
        self.assertEqual(os.listdir(self.dir), [os.path.basename(self.plain)])


AGENT = """
import os, sys, time
sys.path.insert(0, %(agent_dir)r)
pid = %(pid)s
if pid:
    os.getpid = lambda: pid  # the pid another PID namespace gives this process too
import torchtop_agent
path = torchtop_agent.start(interval_ms=50, socket_dir=%(dir)r)
print(path, flush=True)
sys.stdin.readline()
"""


class TwoProcessesTests(unittest.TestCase):
    """Real processes: the second believes it has the first's pid, as in another namespace."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tt-agent-sock-")
        self.dir = os.path.join(self.tmp, "sockets")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def agent(self, pid=None):
        code = AGENT % {"agent_dir": AGENT_DIR, "pid": pid, "dir": self.dir}
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=clean_env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(proc.wait, WAIT)
        self.addCleanup(proc.kill)
        self.addCleanup(proc.stdout.close)
        return proc, proc.stdout.readline().strip()

    def end(self, proc):
        proc.stdin.close()  # the agent's program reads its end of input and exits
        self.assertEqual(proc.wait(WAIT), 0)

    @needs_pid_namespace
    def test_the_second_agent_of_a_pid_keeps_the_first_and_its_exit_removes_only_its_own(self):
        first, first_path = self.agent()
        self.assertEqual(first_path, os.path.join(self.dir, "%d.sock" % first.pid))
        second, second_path = self.agent(pid=first.pid)
        self.assertEqual(second_path,
                         os.path.join(self.dir, "%d.%d.sock" % (first.pid, PID_NS)))
        for path in (first_path, second_path):
            c = Client(path)
            self.addCleanup(c.close)
            self.assertEqual(c.read()["pid"], first.pid)
        self.assertTrue(answers(first_path), "the second agent removed the first's socket")
        self.end(second)
        self.assertFalse(os.path.exists(second_path))
        self.assertTrue(answers(first_path), "the second agent's exit removed the first's socket")
        self.end(first)
        wait_for(lambda: not os.path.exists(first_path), "the first agent's socket to go")

    def test_an_exit_leaves_a_socket_that_is_not_the_one_bound(self):
        out = run_python("""
            import os, socket, sys
            sys.path.insert(0, %r)
            import torchtop_agent
            path = torchtop_agent.start(socket_dir=%r)
            # Gone (moved away, keeping its inode number), and the name taken by another agent.
            os.rename(path, path + ".gone")
            theirs = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            theirs.bind(path)
            print(path, flush=True)
            sys.exit(0)
        """ % (AGENT_DIR, self.dir))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(os.path.exists(out.stdout.strip()),
                        "the exit removed a socket the agent did not bind")


if __name__ == "__main__":
    unittest.main()
