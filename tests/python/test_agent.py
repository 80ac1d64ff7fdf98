"""Tests of the torchtop Python agent against a stand-in torch (no CUDA needed).

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import atexit
import contextlib
import io
import json
import os
import pickle
import shutil
import socket
import stat
import sys
import tempfile
import textwrap
import time
import types
import unittest

from agent_testlib import AGENT_DIR, FAKE_TORCH_DIR, Client, reset_fake_torch, run_python

import torch  # noqa: E402  (the stand-in)
import torchtop_agent  # noqa: E402

assert torch.__version__.endswith("+fake"), "tests must run against the stand-in torch"


class AgentCase(unittest.TestCase):
    def setUp(self):
        reset_fake_torch()
        self.tmp = tempfile.mkdtemp(prefix="tt-agent-")
        self.dir = os.path.join(self.tmp, "sockets")
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        torchtop_agent.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, interval_ms=50):
        path = torchtop_agent.start(interval_ms=interval_ms, socket_dir=self.dir)
        self.assertIsNotNone(path)
        return path

    def connect(self, path):
        c = Client(path)
        self.clients.append(c)
        return c


class MessageTests(AgentCase):
    def test_hello_fields(self):
        env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
               "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            path = self.start(interval_ms=250)
            hello = self.connect(path).read()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.assertEqual(hello["v"], 1)
        self.assertEqual(hello["type"], "hello")
        self.assertEqual(hello["pid"], os.getpid())
        self.assertEqual(hello["argv"], sys.argv)
        self.assertEqual(hello["python"], "%d.%d.%d" % sys.version_info[:3])
        self.assertEqual(hello["torch"], "2.11.0+fake")
        self.assertEqual((hello["rank"], hello["local_rank"], hello["world_size"]), (3, 1, 8))
        self.assertEqual(hello["alloc_conf"], "expandable_segments:True")
        self.assertEqual(hello["interval_ms"], 250)

    def test_socket_path_follows_pid(self):
        path = self.start()
        self.assertEqual(path, os.path.join(self.dir, "%d.sock" % os.getpid()))
        self.assertEqual(torchtop_agent.socket_path(), path)

    def test_start_is_idempotent(self):
        first = self.start()
        self.assertEqual(torchtop_agent.start(interval_ms=999, socket_dir=self.dir + "-other"), first)
        self.assertFalse(os.path.exists(self.dir + "-other"))

    def test_no_devices_and_no_stats_calls_before_cuda_init(self):
        c = self.connect(self.start())
        stats = c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= 3)
        self.assertEqual(stats["devices"], [])
        self.assertFalse([x for x in torch.cuda._calls if isinstance(x, tuple)],
                         "memory_stats must not be called before CUDA is initialized")

    def test_stats_carry_the_keys_torchtop_reads_and_seq_increases(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        self.assertEqual(c.read()["type"], "hello")
        seen = [c.read_until(lambda m: m["type"] == "stats") for _ in range(4)]
        seqs = [m["seq"] for m in seen]
        self.assertEqual(seqs, sorted(set(seqs)), "seq must strictly increase")
        reference = torch.cuda.memory_stats(0)
        for m in seen:
            self.assertEqual([d["index"] for d in m["devices"]], [0], "only the used device")
            stats = m["devices"][0]["stats"]
            self.assertEqual(sorted(stats), sorted(torchtop_agent.SENT_STATS))
            self.assertTrue(set(stats) <= set(reference), "memory_stats' own key names")
            self.assertIsInstance(stats["allocated_bytes.all.current"], int)
            self.assertIsInstance(m["ts"], float)
            self.assertIsNone(m["step"])
        values = [m["devices"][0]["stats"]["allocated_bytes.all.current"] for m in seen]
        self.assertEqual(len(set(values)), len(values), "values change between reads")

    def test_visible_devices_and_each_used_devices_uuid_name_the_physical_gpu(self):
        asked = []

        class Props:
            def __init__(self, index):
                self.uuid = "5a7b%04d-0000-1111-2222-333344445555" % index

        def get_device_properties(index):
            asked.append(index)
            return Props(index)

        old = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = "2,3"
        torch.cuda.get_device_properties = get_device_properties
        try:
            torch.cuda._fake_init([1])
            c = self.connect(self.start())
            hello = c.read()
            stats = c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= 3)
        finally:
            del torch.cuda.get_device_properties
            if old is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = old
        self.assertEqual(hello["cuda_visible_devices"], "2,3")
        self.assertEqual([(d["index"], d["uuid"]) for d in stats["devices"]],
                         [(1, "5a7b0001-0000-1111-2222-333344445555")])
        self.assertEqual(asked, [1], "asked once, and only for the device in use")

    def test_without_device_properties_a_device_has_no_uuid(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        stats = c.read_until(lambda m: m["type"] == "stats" and m["devices"])
        self.assertNotIn("uuid", stats["devices"][0])

    def test_device_stays_reported_once_used(self):
        torch.cuda._fake_init([1])
        c = self.connect(self.start())
        first = c.read_until(lambda m: m["type"] == "stats" and m["devices"])
        self.assertEqual([d["index"] for d in first["devices"]], [1])
        torch.cuda._used.discard(1)  # all its counters read zero now, as after empty_cache + reset
        later = c.read_until(lambda m: m["type"] == "stats" and m["seq"] > first["seq"] + 1)
        self.assertEqual([d["index"] for d in later["devices"]], [1])

    def test_cuda_malloc_async_reports_the_device_a_rank_set_on_its_own_thread(self):
        # Rank 1 of a job: set_device(1) on the training thread; the agent's thread stays on
        # device 0 (current_device is per thread), which this process never uses.
        torch.cuda.set_device(1)
        torch.cuda._fake_init([1])
        old = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
        try:
            c = self.connect(self.start())
            stats = c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= 3)
        finally:
            torch.cuda.set_device(0)
            if old is None:
                os.environ.pop("PYTORCH_CUDA_ALLOC_CONF")
            else:
                os.environ["PYTORCH_CUDA_ALLOC_CONF"] = old
        self.assertEqual([d["index"] for d in stats["devices"]], [1],
                         "the rank's own device is reported, the unused device 0 is not")

    def test_cuda_malloc_async_reads_nothing_before_cuda_is_initialized(self):
        old = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
        try:
            c = self.connect(self.start())
            stats = c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= 3)
        finally:
            if old is None:
                os.environ.pop("PYTORCH_CUDA_ALLOC_CONF")
            else:
                os.environ["PYTORCH_CUDA_ALLOC_CONF"] = old
        self.assertEqual(stats["devices"], [])
        touched = [x for x in torch.cuda._calls if x not in ("is_initialized",)]
        self.assertEqual(touched, [], "nothing but is_initialized before the program's CUDA init")

    def test_step_number_and_step_time(self):
        c = self.connect(self.start())
        first = last = None
        for _ in range(4):
            last = time.monotonic()
            torchtop_agent.step()
            first = first or last
            time.sleep(0.02)
        stats = c.read_until(lambda m: m["type"] == "stats" and m["step"] == 4)
        self.assertGreaterEqual(stats["step_time_s"], 0.015)
        # No longer than the steps' own spacing, as measured here around them (not a speed).
        self.assertLessEqual(stats["step_time_s"], (time.monotonic() - first) / 3)

    def test_hello_is_resent_when_torch_facts_change(self):
        saved = sys.modules.pop("torch")
        try:
            c = self.connect(self.start())
            self.assertIsNone(c.read()["torch"])
        finally:
            sys.modules["torch"] = saved
        hello = c.read_until(lambda m: m["type"] == "hello")
        self.assertEqual(hello["torch"], "2.11.0+fake")

    def test_a_monitor_connected_earlier_hears_facts_that_a_later_one_is_greeted_with(self):
        saved = sys.modules.pop("torch")
        try:
            path = self.start(interval_ms=3_600_000)  # no tick: only the greetings speak
            first = self.connect(path)
            self.assertIsNone(first.read()["torch"])
        finally:
            sys.modules["torch"] = saved
        second = self.connect(path)
        self.assertEqual(second.read()["torch"], "2.11.0+fake")
        hello = first.read_until(lambda m: m["type"] == "hello")
        self.assertEqual(hello["torch"], "2.11.0+fake")

    def test_a_rank_known_later_is_said_again(self):
        """Once the program initializes torch.distributed, the rank reaches the monitor in a new
        hello, within HELLO_RECHECK_TICKS ticks."""
        env = {name: os.environ.pop(name, None) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        initialized = []
        torch.distributed = types.SimpleNamespace(
            is_available=lambda: True, is_initialized=lambda: bool(initialized),
            get_rank=lambda: 5, get_world_size=lambda: 8)
        try:
            c = self.connect(self.start(interval_ms=20))
            self.assertIsNone(c.read()["rank"])
            initialized.append(True)
            hello = c.read_until(lambda m: m["type"] == "hello")
            self.assertEqual((hello["rank"], hello["world_size"]), (5, 8))
        finally:
            del torch.distributed
            os.environ.update({k: v for k, v in env.items() if v is not None})

    def test_the_hello_is_not_built_at_every_tick(self):
        """Built cold after a training step, the hello is a good part of a tick's cost."""
        c = self.connect(self.start(interval_ms=10))
        agent = torchtop_agent._agent
        built, hello = [], agent._hello
        agent._hello = lambda: built.append(1) or hello()
        first = c.read_until(lambda m: m["type"] == "stats")["seq"]
        c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= first + 3 * torchtop_agent.HELLO_RECHECK_TICKS)
        self.assertLessEqual(len(built), 4, "the hello was built %d times in 30 ticks" % len(built))

    def test_oom_observer_event_without_duplicate(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        c.read_until(lambda m: m["type"] == "stats" and m["devices"])
        self.assertEqual(len(torch._C._oom_observers), 1, "observer attached once")
        torch.cuda._fake_oom(0, requested=123)
        event = c.read_until(lambda m: m["type"] == "event")
        self.assertEqual((event["kind"], event["device"], event["source"]), ("oom", 0, "observer"))
        self.assertEqual(event["requested_bytes"], 123)
        # The counter rise that follows is the same OOM: no second event.
        after = c.read_until(lambda m: m["type"] == "stats" and m["devices"][0]["stats"]["num_ooms"] == 1)
        nxt = c.read_until(lambda m: m["type"] in ("stats", "event") and m.get("seq", 0) > after["seq"] + 2)
        self.assertEqual(nxt["type"], "stats")

    def test_an_oom_before_any_monitor_connects_is_reported(self):
        """The commonest OOM comes with a model's first allocations: the observer is attached at
        the program's CUDA initialization, not at the first stats reading a monitor gets."""
        path = self.start()
        torch.cuda._fake_init([0])
        self.assertEqual(len(torch._C._oom_observers), 1, "attached at CUDA initialization")
        torch.cuda._fake_oom(0, requested=123)
        c = self.connect(path)
        event = c.read_until(lambda m: m["type"] == "event")
        self.assertEqual((event["kind"], event["source"], event["requested_bytes"]),
                         ("oom", "observer", 123))
        # The counter's first reading already holds it: no second event for the same OOM.
        torch.cuda._fake_set(0, "num_ooms", 1)
        first = c.read_until(lambda m: m["type"] == "stats" and m["devices"])
        nxt = c.read_until(lambda m: m["type"] in ("stats", "event") and m.get("seq", 0) > first["seq"] + 2)
        self.assertEqual(nxt["type"], "stats")

    def test_oom_event_from_counter(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        c.read_until(lambda m: m["type"] == "stats" and m["devices"])
        torch.cuda._fake_set(0, "num_ooms", 2)
        event = c.read_until(lambda m: m["type"] == "event")
        self.assertEqual((event["kind"], event["source"], event["num_ooms"]), ("oom", "num_ooms", 2))


class PermissionTests(AgentCase):
    def test_dir_is_0700_and_socket_0600(self):
        path = self.start()
        d = os.lstat(self.dir)
        self.assertEqual(stat.S_IMODE(d.st_mode), 0o700)
        self.assertEqual(d.st_uid, os.getuid())
        s = os.lstat(path)
        self.assertTrue(stat.S_ISSOCK(s.st_mode))
        self.assertEqual(stat.S_IMODE(s.st_mode), 0o600)

    def assert_refused(self, directory, needle):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertIsNone(torchtop_agent.start(interval_ms=50, socket_dir=directory))
        self.assertIn(needle, err.getvalue())
        self.assertIsNone(torchtop_agent.socket_path())

    def test_refuses_symlinked_dir(self):
        real = os.path.join(self.tmp, "real")
        os.mkdir(real, 0o700)
        link = os.path.join(self.tmp, "link")
        os.symlink(real, link)
        self.assert_refused(link, "symlink")
        self.assertEqual(os.listdir(real), [])

    def test_refuses_group_or_world_accessible_dir(self):
        os.mkdir(self.dir, 0o700)
        os.chmod(self.dir, 0o755)
        self.assert_refused(self.dir, "mode 755")

    @unittest.skipUnless(os.getuid() == 0, "needs root to chown a directory to another user")
    def test_refuses_dir_of_another_user(self):
        os.mkdir(self.dir, 0o700)
        os.chown(self.dir, 65534, 65534)
        self.assert_refused(self.dir, "owned by uid 65534")

    def test_the_socket_appears_only_once_it_listens(self):
        # A monitor that connected between bind() and listen() was refused, and tried again
        # only seconds later: `torchtop --once` then showed the process without its agent.
        os.mkdir(self.dir, 0o700)
        final = os.path.join(self.dir, "%d.sock" % os.getpid())
        seen = []
        real_chmod = torchtop_agent.os.chmod

        def chmod(path, mode, *args, **kwargs):
            seen.append(os.path.exists(final))
            return real_chmod(path, mode, *args, **kwargs)

        torchtop_agent.os.chmod = chmod
        try:
            path = self.start()
        finally:
            torchtop_agent.os.chmod = real_chmod
        self.assertEqual(path, final)
        self.assertEqual(seen, [False], "the socket was in place before it listened")
        self.assertEqual(os.listdir(self.dir), [os.path.basename(final)])
        self.assertEqual(self.connect(path).read()["type"], "hello")

    def test_a_file_at_the_socket_path_is_left_alone(self):
        # The socket is put in place by a link, which fails where a rename would replace.
        os.mkdir(self.dir, 0o700)
        final = os.path.join(self.dir, "%d.sock" % os.getpid())
        with open(final, "w") as f:
            f.write("precious")
        self.assertIsNone(torchtop_agent.start(interval_ms=50, socket_dir=self.dir))
        with open(final) as f:
            self.assertEqual(f.read(), "precious")
        self.assertEqual(os.listdir(self.dir), [os.path.basename(final)])

    def test_replaces_stale_socket_of_same_pid(self):
        os.mkdir(self.dir, 0o700)
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(os.path.join(self.dir, "%d.sock" % os.getpid()))
        stale.close()
        c = self.connect(self.start())
        self.assertEqual(c.read()["type"], "hello")


class ForkTests(AgentCase):
    def test_forked_child_neither_serves_nor_removes_the_socket(self):
        path = self.start()
        listener_inode = os.fstat(torchtop_agent._agent.listener.fileno()).st_ino
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(r)
            problems = []
            if torchtop_agent.socket_path() is not None:
                problems.append("child reports a socket")
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if os.readlink("/proc/self/fd/" + fd) == "socket:[%d]" % listener_inode:
                        problems.append("child holds the listening socket (fd %s)" % fd)
                except OSError:
                    pass
            torchtop_agent.step()  # must be harmless in the child
            atexit._run_exitfuncs()  # what a normal exit of the child runs
            if not os.path.exists(path):
                problems.append("child removed the parent's socket")
            os.write(w, "; ".join(problems).encode() or b"ok")
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        report = os.read(r, 4096).decode()
        os.close(r)
        self.assertEqual(status, 0)
        self.assertEqual(report, "ok")
        self.assertTrue(os.path.exists(path))
        hello = self.connect(path).read()
        self.assertEqual(hello["pid"], os.getpid(), "the parent still serves")


class CommandTests(AgentCase):
    def command(self, client, cmd_id, cmd, **extra):
        client.send(dict({"v": 1, "type": "cmd", "id": cmd_id, "cmd": cmd}, **extra))
        return client.read_until(lambda m: m["type"] == "reply" and m["id"] == cmd_id)

    def test_set_interval(self):
        # The longest interval there is: stats that waited it out would come in an hour, far past
        # the client's WAIT, so any that come at all prove the new interval is in force.
        c = self.connect(self.start(interval_ms=torchtop_agent.MAX_INTERVAL_MS))
        reply = self.command(c, 7, "set_interval", ms=40)
        self.assertEqual((reply["ok"], reply["interval_ms"]), (True, 40))
        stats = c.read_until(lambda m: m["type"] == "stats" and m["interval_ms"] == 40)
        c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= stats["seq"] + 3)

    def test_set_interval_rejects_bad_values(self):
        c = self.connect(self.start())
        for i, ms in enumerate(["fast", 0, True, 10 ** 9]):
            reply = self.command(c, i, "set_interval", ms=ms)
            self.assertFalse(reply["ok"], ms)
            self.assertIn("ms must be", reply["error"])

    def test_reset_peak(self):
        c = self.connect(self.start())
        early = self.command(c, 1, "reset_peak")
        self.assertFalse(early["ok"])
        self.assertIn("CUDA is not initialized", early["error"])
        torch.cuda._fake_init([0, 1])
        reply = self.command(c, 2, "reset_peak")
        self.assertTrue(reply["ok"])
        self.assertEqual(reply["devices"], [0, 1])
        self.assertEqual(torch.cuda._peak_resets, [0, 1])

    def test_snapshot_file_beside_socket(self):
        torch.cuda._fake_init([0])
        path = self.start()
        c = self.connect(path)
        reply = self.command(c, 3, "snapshot")
        self.assertTrue(reply["ok"], reply)
        snap = reply["path"]
        self.assertEqual(os.path.dirname(snap), os.path.dirname(path))
        self.assertEqual(stat.S_IMODE(os.lstat(snap).st_mode), 0o600)
        self.assertEqual(os.path.getsize(snap), reply["bytes"])
        with open(snap, "rb") as f:
            data = pickle.load(f)
        self.assertEqual(data["segments"][0]["blocks"][0]["state"], "active_allocated")
        second = self.command(c, 4, "snapshot")
        self.assertNotEqual(second["path"], snap, "a second snapshot never overwrites the first")

    def test_unknown_command_and_unknown_type(self):
        c = self.connect(self.start())
        c.send({"v": 1, "type": "future-thing", "x": 1})
        reply = self.command(c, 9, "dance", extra_field=True)
        self.assertFalse(reply["ok"])
        self.assertIn("unknown command", reply["error"])


class BadClientTests(AgentCase):
    BAD = {
        "garbage": b"this is not json\n",
        "not utf-8": b"\xff\xfe{}\n",
        "version 2": b'{"v":2,"type":"cmd","id":1,"cmd":"reset_peak"}\n',
        "not an object": b"[1,2,3]\n",
        "cmd without id": b'{"v":1,"type":"cmd","cmd":"reset_peak"}\n',
        "oversized": b"{" + b" " * ((1 << 20) + 10),
    }

    def test_bad_client_dropped_other_keeps_working(self):
        path = self.start()
        good = self.connect(path)
        for name, payload in self.BAD.items():
            with self.subTest(name):
                bad = self.connect(path)
                try:
                    bad.send(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                bad.sock.settimeout(2.0)
                self.assertTrue(bad.closed_by_peer(), "%s must drop the client" % name)
                good.send({"v": 1, "type": "cmd", "id": 100, "cmd": "set_interval", "ms": 50})
                reply = good.read_until(lambda m: m["type"] == "reply" and m["id"] == 100)
                self.assertTrue(reply["ok"])
        self.assertEqual(good.read_until(lambda m: m["type"] == "stats")["v"], 1)

    def test_many_clients_at_once(self):
        path = self.start()
        clients = [self.connect(path) for _ in range(5)]
        for c in clients:
            self.assertEqual(c.read()["type"], "hello")
            self.assertEqual(c.read_until(lambda m: m["type"] == "stats")["v"], 1)


class ProcessTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tt-agent-proc-")
        self.dir = os.path.join(self.tmp, "sockets")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_socket_removed_at_exit(self):
        out = run_python("""
            import sys, os
            sys.path.insert(0, %r)
            import torchtop_agent
            path = torchtop_agent.start(socket_dir=%r)
            print(path, os.path.exists(path), flush=True)
            sys.exit(0)
        """ % (AGENT_DIR, self.dir))
        self.assertEqual(out.returncode, 0, out.stderr)
        path, existed = out.stdout.split()
        self.assertEqual(existed, "True")
        self.assertFalse(os.path.exists(path), "socket must be gone after exit")

    def test_agent_never_imports_torch(self):
        out = run_python("""
            import sys, json, socket, time
            sys.path.insert(0, %r)
            sys.path.insert(0, %r)   # the stand-in torch is importable, so a stray import would work
            import torchtop_agent
            path = torchtop_agent.start(interval_ms=20, socket_dir=%r)
            c = socket.socket(socket.AF_UNIX); c.settimeout(5); c.connect(path)
            f = c.makefile("rb")
            hello = json.loads(f.readline())
            stats = [json.loads(f.readline()) for _ in range(3)]
            print(json.dumps({"torch_loaded": "torch" in sys.modules, "hello_torch": hello["torch"],
                              "devices": [s["devices"] for s in stats]}))
        """ % (AGENT_DIR, FAKE_TORCH_DIR, self.dir))
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertFalse(result["torch_loaded"])
        self.assertIsNone(result["hello_torch"])
        self.assertEqual(result["devices"], [[], [], []])

    def site_env(self, site_dir, extra_paths=()):
        return {"PYTHONPATH": os.pathsep.join([site_dir] + list(extra_paths)),
                "TORCHTOP_AGENT_DIR": self.dir}

    def test_sitecustomize_starts_agent_and_chains_existing_one(self):
        other = os.path.join(self.tmp, "other")
        os.mkdir(other)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['CHAINED_SITECUSTOMIZE'] = 'yes'\n")
        out = run_python("""
            import os, torchtop_agent
            print(torchtop_agent.socket_path(), os.environ.get('CHAINED_SITECUSTOMIZE'))
        """, self.site_env(AGENT_DIR, [other]))
        self.assertEqual(out.returncode, 0, out.stderr)
        path, chained = out.stdout.split()
        self.assertEqual(path, os.path.join(self.dir, "%s.sock" % path.rsplit("/", 1)[1].split(".")[0]))
        self.assertEqual(chained, "yes")
        self.assertFalse(os.path.exists(path), "removed at exit")

    def test_another_torchtop_sitecustomize_is_passed_over(self):
        """A review: with a copy of this sitecustomize on the path too (another torchtop's site
        directory), the two chained to each other: 150 lines of RecursionError and twice "the
        agent did not start", though it had. In either order the copy is passed over, quietly,
        and the user's own sitecustomize runs once. A user's sitecustomize that chains on finds
        ours again: entered again, ours chains on past both, so the next one runs, once (a
        review: it stopped there, and the next one never ran)."""
        copy, other, chainer = (os.path.join(self.tmp, d) for d in ("copy", "other", "chainer"))
        for d in (copy, other, chainer):
            os.mkdir(d)
        shutil.copy(os.path.join(AGENT_DIR, "sitecustomize.py"), copy)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import sys\nsys.stderr.write('user sitecustomize ran\\n')\n")
        with open(os.path.join(chainer, "sitecustomize.py"), "w") as f:
            f.write(textwrap.dedent("""\
                import importlib.machinery, importlib.util, os, sys
                sys.stderr.write('chainer ran\\n')
                here = os.path.dirname(os.path.abspath(__file__))
                rest = [p for p in sys.path if os.path.abspath(p) != here]
                spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            """))
        cases = [([AGENT_DIR, copy, other], "user sitecustomize ran\n"),
                 ([copy, AGENT_DIR, other], "user sitecustomize ran\n"),
                 ([AGENT_DIR, chainer, other], "chainer ran\nuser sitecustomize ran\n"),
                 ([chainer, AGENT_DIR, other], "chainer ran\nuser sitecustomize ran\n")]
        for order, stderr in cases:
            env = {"PYTHONPATH": os.pathsep.join(order), "TORCHTOP_AGENT_DIR": self.dir}
            out = run_python("import torchtop_agent; print(torchtop_agent.socket_path())", env)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stderr, stderr, order)
            self.assertTrue(out.stdout.strip().endswith(".sock"), (order, out.stdout))

    def test_sitecustomize_never_breaks_the_program(self):
        other = os.path.join(self.tmp, "other")
        os.mkdir(other)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("raise RuntimeError('broken user sitecustomize')\n")
        real = os.path.join(self.tmp, "real")
        os.mkdir(real, 0o700)
        os.symlink(real, self.dir)  # the agent must refuse this directory
        out = run_python("print('program ran')", self.site_env(AGENT_DIR, [other]))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "program ran")
        self.assertIn("broken user sitecustomize", out.stderr)
        self.assertIn("symlink", out.stderr)


if __name__ == "__main__":
    unittest.main()
