"""The agent across the lives of real training processes: forks, SIGTERM, multiprocessing
workers and helpers, Python 3.12+'s fork warning, and faults that must never stop it.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import unittest

from agent_testlib import (AGENT_DIR, WAIT, Client, TempDirMixin, clean_env, exit_signal,
                           other_pythons, reset_fake_torch, run_python, sockets_in, wait_for)

import torch  # noqa: E402  (the stand-in)
import torchtop_agent  # noqa: E402

assert torch.__version__.endswith("+fake"), "tests must run against the stand-in torch"


class InProcessCase(TempDirMixin, unittest.TestCase):
    def setUp(self):
        reset_fake_torch()
        self.make_tmp()
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        torchtop_agent.stop()

    def start(self, interval_ms=50):
        path = torchtop_agent.start(interval_ms=interval_ms, socket_dir=self.dir)
        self.assertIsNotNone(path)
        return path

    def connect(self, path):
        c = Client(path)
        self.clients.append(c)
        self.assertEqual(c.read()["type"], "hello")
        return c

    def fork(self, child):
        """Forks; the child runs child() and reports what it returns (a string, "" for fine)."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                report = child() or ""
            except BaseException as e:  # the child must never reach the test runner
                report = "child raised %r" % (e,)
            os.write(w, report.encode() or b"ok")
            os._exit(0)
        os.close(w)
        return pid, r

    def child_report(self, pid, r):
        with os.fdopen(r, "rb") as f:
            report = f.read().decode()
        _, status = os.waitpid(pid, 0)
        self.assertEqual(status, 0)
        return report


class CommandsAfterForkTests(InProcessCase):
    """Issue: the child's fork hook unregistered the clients from the epoll set it shares with the
    parent, so the parent never read another command."""

    def test_commands_answered_after_a_forked_child_exits(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())

        def child():
            atexit._run_exitfuncs()  # what a normal exit of the child runs

        self.assertEqual(self.child_report(*self.fork(child)), "ok")
        reply = c.command(1, "snapshot")
        self.assertTrue(reply["ok"], reply)
        self.assertEqual(c.command(2, "set_interval", ms=40)["interval_ms"], 40)
        self.assertTrue(c.command(3, "reset_peak")["ok"])

    def test_commands_answered_while_a_forked_worker_lives(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        go_r, go_w = os.pipe()

        def worker():  # a DataLoader worker: lives on, waiting for work
            os.close(go_w)
            os.read(go_r, 1)

        pid, r = self.fork(worker)
        os.close(go_r)
        try:
            reply = c.command(1, "snapshot")
            self.assertTrue(reply["ok"], reply)
            self.assertEqual(c.command(2, "set_interval", ms=30)["interval_ms"], 30)
        finally:
            os.close(go_w)
            self.assertEqual(self.child_report(pid, r), "ok")
        # And after the worker is gone too, with a second generation of workers.
        self.assertEqual(self.child_report(*self.fork(lambda: None)), "ok")
        self.assertTrue(c.command(3, "snapshot")["ok"])

    def test_commands_answered_after_a_fork_from_another_thread(self):
        c = self.connect(self.start())
        result = {}

        def fork_here():
            result["pid_r"] = self.fork(lambda: None)

        t = threading.Thread(target=fork_here)
        t.start()
        t.join()
        self.assertEqual(self.child_report(*result["pid_r"]), "ok")
        self.assertEqual(c.command(1, "set_interval", ms=25)["interval_ms"], 25)

    def test_clients_connected_after_forks_work_too(self):
        path = self.start()
        for _ in range(3):
            self.assertEqual(self.child_report(*self.fork(lambda: None)), "ok")
        c = self.connect(path)
        self.assertEqual(c.command(1, "set_interval", ms=20)["interval_ms"], 20)

    def test_one_agent_thread_and_flowing_stats_after_many_forks(self):
        c = self.connect(self.start(interval_ms=20))
        for _ in range(10):
            self.assertEqual(self.child_report(*self.fork(lambda: None)), "ok")
        first = c.read_until(lambda m: m["type"] == "stats")
        later = c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= first["seq"] + 3)
        self.assertGreater(later["seq"], first["seq"])
        names = [t.name for t in threading.enumerate() if t.name == "torchtop-agent"]
        self.assertEqual(len(names), 1, "exactly one agent thread serves")

    def test_child_gets_default_sigterm_and_no_wakeup_fd(self):
        self.start()

        def child():
            problems = []
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                problems.append("SIGTERM handler %r in the child" % (signal.getsignal(signal.SIGTERM),))
            fd = signal.set_wakeup_fd(-1)
            if fd != -1:
                problems.append("the child still has wakeup fd %d" % fd)
            if torchtop_agent.socket_path() is not None:
                problems.append("the child reports a socket")
            return "; ".join(problems)

        self.assertEqual(self.child_report(*self.fork(child)), "ok")
        forked = {}  # and in a child forked from a thread, which becomes the child's main thread
        t = threading.Thread(target=lambda: forked.update(pid_r=self.fork(child)))
        t.start()
        t.join()
        self.assertEqual(self.child_report(*forked["pid_r"]), "ok")


class SignalSetupTests(InProcessCase):
    def test_handler_installed_over_the_default_and_removed_by_stop(self):
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)
        self.start()
        self.assertTrue(callable(signal.getsignal(signal.SIGTERM)))
        torchtop_agent.stop()
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)
        self.assertEqual(signal.set_wakeup_fd(-1), -1, "stop() gives the wakeup fd back")

    def test_a_handler_or_ignore_already_there_is_left_alone(self):
        def mine(signum, frame):
            pass

        for existing in (mine, signal.SIG_IGN):
            with self.subTest(existing=existing):
                previous = signal.signal(signal.SIGTERM, existing)
                try:
                    self.start()
                    self.assertIs(signal.getsignal(signal.SIGTERM), existing)
                    torchtop_agent.stop()
                    self.assertIs(signal.getsignal(signal.SIGTERM), existing)
                finally:
                    signal.signal(signal.SIGTERM, previous)

    def test_a_wakeup_fd_already_there_is_left_alone(self):
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        try:
            self.start()
            self.assertEqual(signal.set_wakeup_fd(w), w)
        finally:
            signal.set_wakeup_fd(-1)
            os.close(r)
            os.close(w)

    def test_start_from_another_thread_installs_no_handler(self):
        result = {}
        t = threading.Thread(target=lambda: result.update(path=torchtop_agent.start(socket_dir=self.dir)))
        t.start()
        t.join()
        self.assertIsNotNone(result["path"])
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)


class RobustnessTests(InProcessCase):
    """Nothing the program or torch does may stop the agent or print from it."""

    def test_garbage_from_memory_stats_does_not_stop_the_agent(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start(interval_ms=20))
        for garbage in (["not", "a", "dict"], 42, {"reserved_bytes.all.current": "x" * 3}):
            torch.cuda._stats_garbage = garbage
            seq = c.read_until(lambda m: m["type"] == "stats")["seq"]
            c.read_until(lambda m: m["type"] == "stats" and m["seq"] > seq + 2)
        torch.cuda._stats_garbage = None
        self.assertTrue(c.command(1, "reset_peak")["ok"])
        self.assertEqual(c.command(2, "set_interval", ms=30)["interval_ms"], 30)

    def test_odd_sys_argv_does_not_stop_the_agent(self):
        saved = sys.argv
        c = self.connect(self.start(interval_ms=20))
        try:
            sys.argv = None  # some launchers do odd things to it
            seq = c.read_until(lambda m: m["type"] == "stats")["seq"]
            c.read_until(lambda m: m["type"] == "stats" and m["seq"] > seq + 2)
            late = self.connect(torchtop_agent.socket_path())
            self.assertEqual(late.command(1, "set_interval", ms=30)["interval_ms"], 30)
        finally:
            sys.argv = saved

    def test_thread_failures_print_nothing(self):
        out = run_python("""
            import sys, time
            sys.path.insert(0, %r)
            from agent_testlib import Client  # puts the agent on sys.path
            import torchtop_agent
            path = torchtop_agent.start(interval_ms=10, socket_dir=%r)
            c = Client(path)
            c.read_until(lambda m: m["type"] == "stats")  # connected and served
            agent = torchtop_agent._agent
            def boom(*a, **k):
                raise RuntimeError("injected")
            agent._stats = boom       # every tick fails from now on
            agent._hello = boom
            deadline = time.monotonic() + 10
            while sum("_tick" in m for m in list(agent.log)) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            print(c.command(1, "set_interval", ms=20)["ok"], list(agent.log)[-1])
        """ % (os.path.dirname(os.path.abspath(__file__)), self.dir))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split()[0], "True", out.stdout)
        self.assertIn("internal error in _tick: RuntimeError('injected')", out.stdout)
        self.assertEqual(out.stderr, "", "the agent printed from its thread")


class SigtermTests(TempDirMixin, unittest.TestCase):
    """Issue: a process ended by SIGTERM (how multiprocessing ends pool workers, how torchrun ends
    ranks) left its socket behind."""

    def setUp(self):
        self.make_tmp()

    def launch(self, body, **env_extra):
        """Starts a program under the sitecustomize; returns (process, socket path)."""
        code = "import sys, signal, time, torchtop_agent\n" + body
        env = clean_env(dict(self.site_env(), **env_extra))
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.reap, proc)
        path = proc.stdout.readline().strip()
        if not path.endswith(".sock"):
            proc.kill()
            self.fail("no socket path; stderr: %s" % proc.stderr.read())
        wait_for(lambda: os.path.exists(path), "the socket")
        return proc, path

    def reap(self, proc):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()

    def terminate(self, proc):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT)
        return proc.stdout.read(), proc.stderr.read()

    def test_sigterm_removes_the_socket_and_the_process_dies_of_sigterm(self):
        proc, path = self.launch("print(torchtop_agent.socket_path(), flush=True)\ntime.sleep(120)\n")
        _, err = self.terminate(proc)
        self.assertEqual(exit_signal(proc.returncode), "SIGTERM", err)
        self.assertFalse(os.path.exists(path), "the socket outlived SIGTERM")
        self.assertEqual(err, "")

    def test_sigterm_as_soon_as_the_socket_is_in_place_removes_it(self):
        # A launcher (or a test) that signals the moment the socket appears: the handler used to
        # be installed only after the socket was put in place, which left it behind.
        code = (
            "import os, signal, time, torchtop_agent\n"
            "place = torchtop_agent._put_in_place\n"
            "def placing(staging, names):\n"
            "    path = place(staging, names)\n"
            "    print(path, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(30)\n"
            "    return path\n"
            "torchtop_agent._put_in_place = placing\n"
            "torchtop_agent.start(socket_dir=%r)\n"
            "time.sleep(30)\n" % self.dir)
        env = clean_env(dict(self.site_env(), TORCHTOP_AGENT_DISABLE="1"))
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=WAIT)
        self.assertEqual(exit_signal(proc.returncode), "SIGTERM", proc.stderr)
        path = proc.stdout.strip()
        self.assertTrue(path.endswith(".sock"), proc.stdout)
        self.assertFalse(os.path.exists(path), "the socket outlived SIGTERM")
        self.assertEqual(os.listdir(self.dir), [], "a staging name was left")

    def test_sigterm_while_the_main_thread_is_stuck_in_c(self):
        # A hung collective or CUDA sync: the main thread never returns to Python, so a Python
        # handler alone would never run and SIGTERM would stop killing the process.
        proc, path = self.launch(
            "import ctypes\n"
            "libc = ctypes.CDLL(None)\n"
            "mutex = ctypes.create_string_buffer(64)  # PTHREAD_MUTEX_INITIALIZER is all zeros\n"
            "libc.pthread_mutex_lock(mutex)\n"
            "print(torchtop_agent.socket_path(), flush=True)\n"
            "libc.pthread_mutex_lock(mutex)  # deadlocks for good\n")
        _, err = self.terminate(proc)
        self.assertEqual(exit_signal(proc.returncode), "SIGTERM", err)
        self.assertFalse(os.path.exists(path), "the socket outlived SIGTERM")

    def test_sigterm_when_the_wakeup_fd_belongs_to_the_program(self):
        proc, path = self.launch(
            "import os\n"
            "r, w = os.pipe(); os.set_blocking(w, False); signal.set_wakeup_fd(w)\n"
            "torchtop_agent.start(socket_dir=%r)\n"
            "print(torchtop_agent.socket_path(), flush=True)\n"
            "time.sleep(120)\n" % self.dir, TORCHTOP_AGENT_DISABLE="1")
        _, err = self.terminate(proc)
        self.assertEqual(exit_signal(proc.returncode), "SIGTERM", err)
        self.assertFalse(os.path.exists(path))

    def test_a_handler_the_program_installs_later_decides(self):
        proc, path = self.launch(
            "def graceful(signum, frame):\n"
            "    print('graceful', flush=True)\n"
            "    sys.exit(3)\n"
            "signal.signal(signal.SIGTERM, graceful)\n"
            "print(torchtop_agent.socket_path(), flush=True)\n"
            "while True:\n"
            "    time.sleep(0.05)\n")
        out, err = self.terminate(proc)
        self.assertEqual(proc.returncode, 3, err)
        self.assertEqual(out.strip(), "graceful")
        self.assertFalse(os.path.exists(path), "removed at exit")

    def test_a_handler_that_chains_to_ours_keeps_the_process_alive(self):
        # What Lightning's signal connector does: call the handler it found, after its own.
        proc, path = self.launch(
            "import os\n"
            "previous = signal.getsignal(signal.SIGTERM)\n"
            "got = []\n"
            "def composed(signum, frame):\n"
            "    got.append(signum)\n"
            "    if callable(previous):\n"
            "        previous(signum, frame)\n"
            "signal.signal(signal.SIGTERM, composed)\n"
            "print(torchtop_agent.socket_path(), flush=True)\n"
            "while not got:\n"
            "    time.sleep(0.05)\n"
            "print('survived', os.path.exists(torchtop_agent.socket_path()), flush=True)\n")
        out, err = self.terminate(proc)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(out.strip(), "survived True")
        self.assertFalse(os.path.exists(path), "removed at exit")


MP_PROGRAM = r'''
import fcntl, json, os, struct, subprocess, sys, termios, time
import multiprocessing as mp
from multiprocessing import resource_tracker


def report(_=None):
    module = sys.modules.get("torchtop_agent")
    return [os.getpid(), module.socket_path() if module is not None else None]


def put(queue):
    queue.put(report())


def tracker_has_read_everything():
    fd = resource_tracker._resource_tracker._fd
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0] == 0


if __name__ == "__main__":
    directory = os.environ["TORCHTOP_AGENT_DIR"]
    out = {"main": report(), "workers": []}
    for method in ("spawn", "forkserver"):
        ctx = mp.get_context(method)
        with ctx.Pool(2) as pool:  # __exit__ ends the workers with SIGTERM
            out["workers"] += pool.map(report, range(4))
        queue = ctx.Queue()
        p = ctx.Process(target=put, args=(queue,))
        p.start()
        out["workers"].append(queue.get(timeout=60))
        p.join()
    # Once the tracker has read our messages it is running its main(), long past the
    # sitecustomize: a socket of its own would exist by now.
    resource_tracker.register("/torchtop-probe", "semaphore")
    resource_tracker.unregister("/torchtop-probe", "semaphore")
    deadline = time.monotonic() + 30
    while not tracker_has_read_everything() and time.monotonic() < deadline:
        time.sleep(0.01)
    helpers = {"resource_tracker": resource_tracker._resource_tracker._pid,
               "forkserver": mp.forkserver._forkserver._forkserver_pid}
    out["helpers"] = {name: [pid, os.path.exists(os.path.join(directory, "%d.sock" % pid))]
                      for name, pid in helpers.items()}
    # A torchrun rank: a program that a launcher starts as a plain subprocess keeps its agent.
    rank = subprocess.run([sys.executable, "-c", "import torchtop_agent; print(torchtop_agent.socket_path())"],
                          env=dict(os.environ, RANK="1", LOCAL_RANK="1", WORLD_SIZE="2"),
                          capture_output=True, text=True, timeout=60)
    out["rank"] = rank.stdout.strip()
    out["sockets_at_end"] = sorted(n for n in os.listdir(directory) if n.endswith(".sock"))
    print(json.dumps(out))
'''


class MultiprocessingTests(TempDirMixin, unittest.TestCase):
    """Issue: under `torchtop run`, spawn workers, the resource tracker and the forkserver each
    started an agent, and SIGTERM-ended workers left their sockets behind."""

    def setUp(self):
        self.make_tmp()

    def test_command_lines_of_multiprocessing_children(self):
        spawn = ["python3", "-B", "-c",
                 "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
                 "--multiprocessing-fork"]
        helpers = [["python3", "-c", "from multiprocessing.resource_tracker import main;main(5)"],
                   ["python3", "-B", "-s", "-c", "from multiprocessing.forkserver import main; main(1, 2, [])"],
                   ["python3", "-c", "from multiprocessing.semaphore_tracker import main;main(5)"],
                   ["python3", "-c", "from multiprocess.spawn import spawn_main; spawn_main(3)",
                    "--multiprocessing-fork"]]
        for argv in [spawn] + helpers:
            self.assertTrue(torchtop_agent.started_by_multiprocessing(argv), argv)
        for argv in (["python3", "train.py"], ["python3", "train.py", "-c", "config.yaml"],
                     ["python3", "-c", "print('from multiprocessing.spawn import')"],
                     ["torchrun", "--nproc-per-node", "2", "train.py"], ["python3"], []):
            self.assertFalse(torchtop_agent.started_by_multiprocessing(argv), argv)

    def test_workers_and_helpers_start_no_agent_and_leave_no_socket(self):
        program = os.path.join(self.tmp, "mp_program.py")  # spawn re-imports the main module
        with open(program, "w") as f:
            f.write(MP_PROGRAM)
        out = subprocess.run([sys.executable, program], env=clean_env(self.site_env()),
                             capture_output=True, text=True, timeout=180)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        main_pid, main_path = result["main"]
        self.assertEqual(main_path, os.path.join(self.dir, "%d.sock" % main_pid))
        self.assertEqual(len(result["workers"]), 10)
        for pid, path in result["workers"]:
            self.assertNotEqual(pid, main_pid)
            self.assertIsNone(path, "worker %d started an agent" % pid)
        for name, (pid, has_socket) in result["helpers"].items():
            self.assertFalse(has_socket, "the %s (pid %d) started an agent" % (name, pid))
        self.assertTrue(result["rank"].endswith(".sock"), "a launched rank keeps its agent: %r" % result)
        self.assertEqual(result["sockets_at_end"], ["%d.sock" % main_pid])
        self.assertEqual(sockets_in(self.dir), [], "sockets left behind")
        self.assertNotIn("torchtop", out.stderr)

    def test_disable_means_a_true_value_not_any_value(self):
        """Issue: TORCHTOP_AGENT_DISABLE=0 (or false) left the agent out as =1 does."""
        code = "import torchtop_agent; print(torchtop_agent.socket_path())"
        for value, started in (("0", True), ("false", True), ("", True), ("1", False), ("yes", False)):
            out = run_python(code, env_extra=dict(self.site_env(), TORCHTOP_AGENT_DISABLE=value))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout.strip().endswith(".sock"), started, (value, out.stdout))

    def test_start_in_the_programs_own_code_starts_nothing_in_its_workers(self):
        """Issue: the README's `torchtop_agent.start()` at the top of train.py ran again in each
        spawn worker (spawn imports the main module again); every worker inherited RANK and
        showed as one more rank of the job."""
        program = os.path.join(self.tmp, "mp_program.py")
        with open(program, "w") as f:
            f.write(MP_PROGRAM.replace(
                "\nimport multiprocessing as mp\n",
                "\nimport multiprocessing as mp\nimport torchtop_agent\ntorchtop_agent.start()\n", 1)
                .replace('\nif __name__ == "__main__":\n', RANK_FUNCTION, 1)
                .replace('    print(json.dumps(out))', RANK_STARTED + '    print(json.dumps(out))', 1))
        env = dict(self.site_env(), TORCHTOP_AGENT_DISABLE="1", RANK="0", WORLD_SIZE="2")
        out = subprocess.run([sys.executable, program], env=clean_env(env),
                             capture_output=True, text=True, timeout=180)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        main_pid, main_path = result["main"]
        self.assertEqual(main_path, os.path.join(self.dir, "%d.sock" % main_pid))
        for pid, path in result["workers"]:
            self.assertIsNone(path, "worker %d started an agent" % pid)
        self.assertEqual(result["sockets_at_end"], ["%d.sock" % main_pid])
        self.assertEqual(sockets_in(self.dir), [], "sockets left behind")
        rank_pid, rank_path = result["spawned_rank"]
        self.assertEqual(rank_path, os.path.join(self.dir, "%d.sock" % rank_pid),
                         "a rank function's own start() starts its agent")


# A `torch.multiprocessing.spawn`-style rank: start() called by the function the child runs.
RANK_FUNCTION = '''
def rank_main(queue):
    torchtop_agent.start()
    queue.put(report())


if __name__ == "__main__":
'''

RANK_STARTED = '''    queue = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=rank_main, args=(queue,))
    p.start()
    out["spawned_rank"] = queue.get(timeout=60)
    p.join()
    out["sockets_at_end"] = sorted(n for n in os.listdir(directory) if n.endswith(".sock"))
'''


FORK_PROGRAM = r'''
import json, multiprocessing, os, sys, threading
sys.path.insert(0, %(agent_dir)r)
sys.path.insert(0, %(lib_dir)r)
import torchtop_agent
from agent_testlib import Client

path = torchtop_agent.start(interval_ms=20, socket_dir=%(dir)r)
client = Client(path)
client.read()
release = threading.Event()
if %(control)r:  # a thread of the program's own: the interpreter must warn
    extra = threading.Thread(target=release.wait)
    extra.start()
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
p = multiprocessing.get_context("fork").Process(target=int)
p.start()
p.join()
reply = client.command(1, "set_interval", ms=20)
first = client.read_until(lambda m: m["type"] == "stats")
later = client.read_until(lambda m: m["type"] == "stats" and m["seq"] >= first["seq"] + 3)
release.set()
print(json.dumps({"reply": reply["ok"], "stats_flow": later["seq"] > first["seq"],
                  "agent_threads": sum(t.name == "torchtop-agent" for t in threading.enumerate())}))
'''


class ForkWarningTests(TempDirMixin, unittest.TestCase):
    """Issue: on Python 3.12+ the agent's thread made every fork warn "This process is
    multi-threaded, use of fork() may lead to deadlocks in the child"."""

    def setUp(self):
        self.make_tmp()

    def run_fork_program(self, python, control):
        code = FORK_PROGRAM % {"agent_dir": AGENT_DIR, "dir": self.dir, "control": control,
                               "lib_dir": os.path.dirname(os.path.abspath(__file__))}
        out = run_python(code, python=python, args=["-W", "always::DeprecationWarning"])
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertEqual(result, {"reply": True, "stats_flow": True, "agent_threads": 1})
        return out.stderr

    def test_no_fork_warning_because_of_the_agent(self):
        pythons = {v: p for v, p in other_pythons((3, 12)).items()}
        if sys.version_info >= (3, 12):
            pythons[sys.version_info[:2]] = sys.executable
        if not pythons:
            if os.environ.get("CI"):
                self.fail("CI is set, so this test may not skip: no Python 3.12+ found")
            print("\nskipped: no Python 3.12+ found (set TORCHTOP_TEST_PYTHONS to check the fork warning)",
                  file=sys.stderr)
            self.skipTest("no Python 3.12+ interpreter on this machine")
        print("\nfork warning checked on Python %s" % ", ".join("%d.%d" % v for v in sorted(pythons)),
              file=sys.stderr)
        for version, python in sorted(pythons.items()):
            with self.subTest(python="%d.%d" % version):
                self.assertIn("multi-threaded", self.run_fork_program(python, control=True),
                              "the control run must warn, or this test proves nothing")
                stderr = self.run_fork_program(python, control=False)
                self.assertNotIn("multi-threaded", stderr)
                self.assertEqual(stderr, "")


if __name__ == "__main__":
    unittest.main()
