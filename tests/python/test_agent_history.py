"""Memory history recording and OOM snapshots in the agent, against the stand-in torch: the
record_history command, starting only after the program's CUDA initialization, the snapshot
written by the OOM observer before the OutOfMemoryError unwinds, and that nothing here ever
reaches the program as an exception.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import json
import os
import pickle
import stat
import subprocess
import time
import unittest

from agent_testlib import FAKE_TORCH_DIR, AGENT_DIR, TempDirMixin, reset_fake_torch, run_python

import torch  # noqa: E402  (the stand-in)
import torchtop_agent  # noqa: E402

from test_agent import AgentCase

GIB = 1 << 30


def oom_files(directory):
    return sorted(n for n in os.listdir(directory) if "-oom-" in n)


class RecordHistoryTests(AgentCase):
    def command(self, client, cmd_id, cmd, **extra):
        client.send(dict({"v": 1, "type": "cmd", "id": cmd_id, "cmd": cmd}, **extra))
        return client.read_until(lambda m: m["type"] == "reply" and m["id"] == cmd_id)

    def test_after_cuda_init_recording_starts_at_once_with_the_defaults(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        reply = self.command(c, 1, "record_history")
        self.assertTrue(reply["ok"], reply)
        self.assertEqual((reply["enabled"], reply["max_entries"], reply["stacks"], reply["context"]),
                         ("all", 100000, "python", "all"))
        self.assertEqual((reply["recording"], reply["pending"]), (True, False))
        self.assertEqual(torch.cuda.memory._history_calls, [("all", "all", "python", 100000)])
        snap = self.command(c, 2, "snapshot")
        with open(snap["path"], "rb") as f:
            data = pickle.load(f)
        self.assertEqual(data["segments"][0]["blocks"][0]["frames"][0]["name"], "forward",
                         "a snapshot taken while recording carries frames")

    def test_explicit_settings_and_stop(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        reply = self.command(c, 1, "record_history", enabled="state", max_entries=5,
                             stacks="all", context="alloc")
        self.assertTrue(reply["ok"], reply)
        self.assertEqual(torch.cuda.memory._history["enabled"], "state")
        stop = self.command(c, 2, "record_history", enabled=None)
        self.assertEqual((stop["ok"], stop["enabled"], stop["recording"]), (True, None, False))
        self.assertIsNone(torch.cuda.memory._history)
        self.assertEqual(torch.cuda.memory._history_calls[-1][0], None)

    def test_bad_settings_get_a_sentence_and_change_nothing(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        for i, bad in enumerate([{"enabled": "yes"}, {"max_entries": 0}, {"max_entries": True},
                                 {"max_entries": "10"}, {"stacks": "cpp"}, {"context": 3}]):
            reply = self.command(c, i, "record_history", **bad)
            self.assertFalse(reply["ok"], bad)
            self.assertRegex(reply["error"], "must be", bad)
        self.assertEqual(torch.cuda.memory._history_calls, [])

    def test_before_cuda_init_it_waits_for_the_program_to_initialize(self):
        c = self.connect(self.start())
        reply = self.command(c, 1, "record_history")
        self.assertTrue(reply["ok"], reply)
        self.assertEqual((reply["recording"], reply["pending"]), (False, True))
        self.assertFalse(torch.cuda._initialized, "the agent must not initialize CUDA")
        self.assertEqual(torch.cuda.memory._history_calls, [])
        torch.cuda._fake_init([0])  # the program's first CUDA use
        self.assertEqual(torch.cuda.memory._history_calls, [("all", "all", "python", 100000)],
                         "recording starts inside the CUDA initialization, before any allocation")
        event = c.read_until(lambda m: m["type"] == "event" and m["kind"] == "record_history")
        self.assertEqual((event["ok"], event["recording"]), (True, True))

    def test_a_failing_deferred_start_is_an_event_never_an_exception(self):
        c = self.connect(self.start())
        self.command(c, 1, "record_history")
        saved = torch.cuda.memory._record_memory_history
        del torch.cuda.memory._record_memory_history
        try:
            torch.cuda._fake_init([0])  # must not raise into the program
        finally:
            torch.cuda.memory._record_memory_history = saved
        event = c.read_until(lambda m: m["type"] == "event" and m["kind"] == "record_history")
        self.assertFalse(event["ok"])
        self.assertIn("torch 2.1 or newer", event["error"])

    def test_a_torch_without_recording_says_so(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        saved = torch.cuda.memory._record_memory_history
        del torch.cuda.memory._record_memory_history
        try:
            reply = self.command(c, 1, "record_history")
        finally:
            torch.cuda.memory._record_memory_history = saved
        self.assertFalse(reply["ok"])
        self.assertIn("has no torch.cuda.memory._record_memory_history", reply["error"])


class SnapshotKeyTests(AgentCase):
    """The monitor's `S` key: record_history with until_snapshot, then snapshot."""

    def press_s(self, c, first_id=1):
        c.send({"v": 1, "type": "cmd", "id": first_id, "cmd": "record_history", "enabled": "all",
                "max_entries": 100000, "stacks": "python", "context": "all", "until_snapshot": True})
        started = c.read_until(lambda m: m["type"] == "reply" and m["id"] == first_id)
        c.send({"v": 1, "type": "cmd", "id": first_id + 1, "cmd": "snapshot"})
        snap = c.read_until(lambda m: m["type"] == "reply" and m["id"] == first_id + 1)
        self.assertTrue(started["ok"], started)
        self.assertTrue(snap["ok"], snap)
        return started, snap

    def test_recording_started_for_the_snapshot_stops_once_it_is_written(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        started, _ = self.press_s(c)
        self.assertIsNone(torch.cuda.memory._history,
                          "recording must stop after the snapshot, or every allocation pays for "
                          "its stack capture for the rest of the run")
        self.assertEqual((started["recording"], started.get("until_snapshot")), (True, True))
        self.assertEqual([call[0] for call in torch.cuda.memory._history_calls], ["all", None])
        torch.cuda._fake_malloc(0, 1 << 20)  # the program goes on allocating
        self.assertEqual(torch.cuda.memory._traces, [], "no stack is captured any more")
        status = self.command_reply(c, 9, "record_history", enabled=None)
        self.assertEqual((status["recording"], status["until_snapshot"]), (False, False))

    def test_the_programs_own_recording_is_left_as_it_was(self):
        torch.cuda._fake_init([0])
        torch.cuda.memory._record_memory_history("state", context="alloc", stacks="all",
                                                 max_entries=7)
        del torch.cuda.memory._history_calls[:]
        c = self.connect(self.start())
        started, _ = self.press_s(c)
        self.assertEqual(torch.cuda.memory._history_calls, [],
                         "the agent neither changes nor stops the program's recording")
        self.assertEqual(torch.cuda.memory._history,
                         {"enabled": "state", "context": "alloc", "stacks": "all", "max_entries": 7})
        self.assertEqual(started.get("until_snapshot"), False)

    def test_a_lasting_recording_stays_on(self):
        # What `torchtop run --record-history` (TORCHTOP_RECORD_HISTORY) and a plain
        # record_history command start: OOM snapshots depend on it.
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        self.assertTrue(self.command_reply(c, 1, "record_history")["recording"])
        self.press_s(c, first_id=2)
        self.assertIsNotNone(torch.cuda.memory._history)
        self.assertEqual(len(torch.cuda.memory._history_calls), 1)
        self.assertTrue(torchtop_agent._agent.history.recording(), "OOM snapshots still written")

    def test_the_environments_recording_stays_on(self):
        os.environ["TORCHTOP_RECORD_HISTORY"] = "all"
        try:
            c = self.connect(self.start())
        finally:
            os.environ.pop("TORCHTOP_RECORD_HISTORY")
        torch.cuda._fake_init([0])  # the queued start runs here
        self.press_s(c)
        self.assertIsNotNone(torch.cuda.memory._history)
        self.assertEqual([call[0] for call in torch.cuda.memory._history_calls], ["all"])

    def test_before_cuda_init_nothing_is_queued(self):
        c = self.connect(self.start())
        c.send({"v": 1, "type": "cmd", "id": 1, "cmd": "record_history", "until_snapshot": True})
        started = c.read_until(lambda m: m["type"] == "reply" and m["id"] == 1)
        self.assertEqual((started["recording"], started["pending"]), (False, False))
        torch.cuda._fake_init([0])
        self.assertEqual(torch.cuda.memory._history_calls, [])

    def command_reply(self, c, cmd_id, cmd, **extra):
        c.send(dict({"v": 1, "type": "cmd", "id": cmd_id, "cmd": cmd}, **extra))
        return c.read_until(lambda m: m["type"] == "reply" and m["id"] == cmd_id)


class OomSnapshotTests(AgentCase):
    def recording(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        c.send({"v": 1, "type": "cmd", "id": 1, "cmd": "record_history"})
        c.read_until(lambda m: m["type"] == "reply" and m["ok"])
        return c

    def oom(self, nbytes=5 * GIB):
        """An allocation that fails; returns the OOM files present when the exception is caught."""
        with self.assertRaises(torch.cuda.OutOfMemoryError):
            torch.cuda._fake_alloc(0, nbytes)
        return oom_files(self.dir)

    def test_the_oom_observer_writes_a_private_snapshot_before_the_exception_unwinds(self):
        c = self.recording()
        at_except = self.oom()
        self.assertEqual(len(at_except), 1, "the file exists by the time the program sees the error")
        event = c.read_until(lambda m: m["type"] == "event" and m["kind"] == "oom")
        self.assertEqual(event["source"], "observer")
        self.assertEqual((event["device"], event["requested_bytes"]), (0, 5 * GIB))
        self.assertEqual((event["device_allocated"], event["device_free"]), (40 << 20, 1 << 20))
        path = event["path"]
        self.assertEqual(os.path.basename(path), at_except[0])
        self.assertRegex(at_except[0], r"^%d-oom-\d{8}-\d{6}(-\d+)?\.pickle$" % os.getpid())
        self.assertEqual(os.path.dirname(path), self.dir)
        st = os.lstat(path)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        self.assertEqual(st.st_size, event["bytes"])
        with open(path, "rb") as f:
            data = pickle.load(f)
        actions = [t["action"] for t in data["device_traces"][0]]
        self.assertEqual(actions, ["oom"], "the trace holds the failed allocation")

    def test_without_recording_the_event_has_no_file(self):
        torch.cuda._fake_init([0])
        c = self.connect(self.start())
        c.read_until(lambda m: m["type"] == "stats" and m["devices"])
        self.oom()
        event = c.read_until(lambda m: m["type"] == "event" and m["kind"] == "oom")
        self.assertNotIn("path", event)
        self.assertEqual(oom_files(self.dir), [])

    def test_a_failing_dump_is_reported_and_the_program_still_gets_its_own_error(self):
        c = self.recording()
        saved = torch.cuda.memory._snapshot

        def broken(device=None):
            raise RuntimeError("snapshot exploded")

        torch.cuda.memory._snapshot = broken
        try:
            self.oom()  # OutOfMemoryError, not the agent's RuntimeError
        finally:
            torch.cuda.memory._snapshot = saved
        event = c.read_until(lambda m: m["type"] == "event" and m["kind"] == "oom")
        self.assertIsNone(event["path"])
        self.assertIn("snapshot exploded", event["error"])

    def test_a_monitor_that_connects_later_still_hears_of_the_oom(self):
        c = self.recording()
        self.oom()
        first = c.read_until(lambda m: m["type"] == "event" and m["kind"] == "oom")
        late = self.connect(torchtop_agent.socket_path())
        again = late.read_until(lambda m: m["type"] == "event" and m["kind"] == "oom")
        self.assertEqual(again, first, "the same event, with its original time")

    def test_files_are_never_overwritten(self):
        self.recording()
        agent = torchtop_agent._agent
        paths = [agent._dump("oom", {"n": i})[0] for i in range(3)]
        self.assertEqual(len(set(paths)), 3)
        for i, path in enumerate(paths):
            with open(path, "rb") as f:
                self.assertEqual(pickle.load(f), {"n": i})

    def test_older_oom_files_are_pruned_over_the_cap_and_nothing_else(self):
        os.mkdir(self.dir, 0o700)
        olds = []
        for i in range(3):
            old = os.path.join(self.dir, "1%d-oom-20200101-00000%d.pickle" % (i, i))
            with open(old, "wb") as f:
                f.write(b"x" * 4000)
            os.utime(old, (1000 + i, 1000 + i))
            olds.append(old)
        other = os.path.join(self.dir, "12-snapshot-20200101-000000.pickle")
        with open(other, "wb") as f:
            f.write(b"x" * 100000)
        target = os.path.join(self.tmp, "elsewhere")
        with open(target, "wb") as f:
            f.write(b"x" * 100000)
        link = os.path.join(self.dir, "13-oom-20200101-000009.pickle")
        os.symlink(target, link)
        os.environ["TORCHTOP_OOM_KEEP_BYTES"] = "5000"  # the new file is about 1 kB
        try:
            c = self.recording()
            self.oom()
            event = c.read_until(lambda m: m["type"] == "event" and m["kind"] == "oom")
        finally:
            del os.environ["TORCHTOP_OOM_KEEP_BYTES"]
        self.assertTrue(os.path.exists(event["path"]), "the new snapshot is kept")
        self.assertEqual([os.path.exists(p) for p in olds], [False, False, True],
                         "the oldest go first, until the total is under the cap")
        self.assertTrue(os.path.exists(other), "other snapshots are not OOM snapshots")
        self.assertTrue(os.path.islink(link) and os.path.exists(target), "links are left alone")


class RecordFromStartTests(TempDirMixin, unittest.TestCase):
    """`torchtop run --record-history`: TORCHTOP_RECORD_HISTORY in the program's environment."""

    PROGRAM = """
        import json, os, sys
        import torchtop_agent
        assert torchtop_agent.socket_path(), torchtop_agent.last_error
        import torch
        out = {"initialized_after_import": torch.cuda._initialized,
               "calls_before_init": list(torch.cuda.memory._history_calls)}
        try:
            torch.cuda._fake_alloc(0, 1 << 40)
        except torch.cuda.OutOfMemoryError:
            d = os.environ["TORCHTOP_AGENT_DIR"]
            out["oom_files"] = sorted(n for n in os.listdir(d) if "-oom-" in n)
        out["history"] = torch.cuda.memory._history
        print(json.dumps(out))
    """

    def setUp(self):
        self.make_tmp()

    def run_program(self, value, **extra):
        env = dict(self.site_env([FAKE_TORCH_DIR]), TORCHTOP_RECORD_HISTORY=value, **extra)
        out = run_python(self.PROGRAM, env)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout), out.stderr

    def test_recording_starts_at_cuda_init_when_torch_is_imported_after_the_agent(self):
        result, _ = self.run_program("all", TORCHTOP_RECORD_HISTORY_MAX_ENTRIES="500")
        self.assertFalse(result["initialized_after_import"], "the agent must not initialize CUDA")
        self.assertEqual(result["calls_before_init"], [])
        self.assertEqual(result["history"]["max_entries"], 500)
        self.assertEqual(len(result["oom_files"]), 1, "the first OOM is captured")

    def test_an_oom_is_caught_when_torch_is_imported_after_the_agent_without_recording(self):
        program = """
            import json
            import torchtop_agent
            assert torchtop_agent.socket_path(), torchtop_agent.last_error
            import torch
            try:
                torch.cuda._fake_alloc(0, 1 << 40)
            except torch.cuda.OutOfMemoryError:
                pass
            oom = torchtop_agent._agent.last_oom
            print(json.dumps({"oom": oom}))
        """
        out = run_python(program, self.site_env([FAKE_TORCH_DIR]))
        self.assertEqual(out.returncode, 0, out.stderr)
        oom = json.loads(out.stdout)["oom"]
        self.assertIsNotNone(oom, "the OOM before any stats reading was not observed")
        self.assertEqual((oom["kind"], oom["source"]), ("oom", "observer"))

    def test_a_probe_for_torch_before_its_import_does_not_end_the_watch(self):
        """transformers, accelerate and lightning ask importlib.util.find_spec("torch") as they
        are imported: the watcher left at that question and never saw `import torch`."""
        program = """
            import importlib.util, json
            import torchtop_agent
            assert torchtop_agent.socket_path(), torchtop_agent.last_error
            assert importlib.util.find_spec("torch") is not None
            import torch
            try:
                torch.cuda._fake_alloc(0, 1 << 40)
            except torch.cuda.OutOfMemoryError:
                pass
            print(json.dumps({"oom": torchtop_agent._agent.last_oom,
                              "history": torch.cuda.memory._history}))
        """
        env = dict(self.site_env([FAKE_TORCH_DIR]), TORCHTOP_RECORD_HISTORY="all")
        out = run_python(program, env)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertIsNotNone(result["oom"], "the OOM observer was never attached")
        self.assertIsNotNone(result["history"], "the recording never started")

    def test_an_agent_started_while_cuda_initializes_does_not_hang_the_program(self):
        """`torchtop attach` runs the agent's start at a bytecode boundary of the main thread,
        which may fall inside torch.cuda._lazy_init: queueing a call there waited for good on
        the lock _lazy_init holds (torch 2.7 on). The start is run as one of the queued calls."""
        program = """
            import json, os, subprocess, sys, time
            import torch
            import torchtop_agent
            started = []
            torch.cuda._lazy_call(lambda: started.append(torchtop_agent.start()))
            torch.cuda._fake_init([0])
            deadline = time.monotonic() + 30
            while not torch._C._oom_observers and time.monotonic() < deadline:
                time.sleep(0.01)
            try:
                torch.cuda._fake_alloc(0, 1 << 40)
            except torch.cuda.OutOfMemoryError:
                pass
            print(json.dumps({"started": started, "oom": torchtop_agent._agent.last_oom}))
        """
        try:
            # -S: no sitecustomize, so the agent starts only where the program starts it.
            out = run_python(program, self.site_env([FAKE_TORCH_DIR]), timeout=20, args=("-S",))
        except subprocess.TimeoutExpired:
            self.fail("the program hung while the agent started during CUDA initialization")
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertTrue(result["started"] and result["started"][0], result)
        self.assertIsNotNone(result["oom"], "the observer was attached after the initialization")

    def test_a_bad_value_is_said_on_stderr_and_the_program_runs(self):
        result, stderr = self.run_program("everything")
        self.assertIsNone(result["history"])
        self.assertEqual(result["oom_files"], [])
        self.assertIn("memory history is not recorded", stderr)


if __name__ == "__main__":
    unittest.main()
