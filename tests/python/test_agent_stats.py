"""How the agent reads the allocator's statistics: only the keys torchtop reads, picked out of
torch.cuda.memory_stats_as_nested_dict (the dict torch's C++ binding builds) without the Python
flattening of memory_stats, falling back to memory_stats on a torch where the nested function
is missing or fails. The figures are the same either way, and a malformed dict gives N/A.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import json
import os
import re
import shutil
import tempfile
import unittest

from agent_testlib import ROOT, Client, reset_fake_torch

import torch  # noqa: E402  (the stand-in)
import torchtop_agent  # noqa: E402

assert torch.__version__.endswith("+fake"), "tests must run against the stand-in torch"

NESTED = "memory_stats_as_nested_dict"


def flatten_like_torch(nested):
    """torch/cuda/memory.py's memory_stats, on a given nested dict."""
    result = []

    def add(prefix, obj):
        if isinstance(obj, dict):
            prefix = prefix + "." if prefix else prefix
            for key, value in obj.items():
                add(prefix + key, value)
        else:
            result.append((prefix, obj))

    add("", nested)
    return dict(sorted(result))


def stats_calls():
    return [x for x in torch.cuda._calls if isinstance(x, tuple) and x[0] in ("memory_stats", NESTED)]


class StatsCase(unittest.TestCase):
    """Drives the agent's stats reading directly, as its thread does each interval."""

    def setUp(self):
        reset_fake_torch()
        self.tmp = tempfile.mkdtemp(prefix="tt-stats-")
        self.agent = torchtop_agent._Agent(os.path.join(self.tmp, "x.sock"), 1000)
        self.hidden = None

    def tearDown(self):
        self.agent.close_all(False)
        self.show_nested()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def hide_nested(self):
        """What the agent sees on a torch without memory_stats_as_nested_dict."""
        self.hidden = getattr(torch.cuda, NESTED)
        delattr(torch.cuda, NESTED)

    def show_nested(self):
        if self.hidden is not None:
            setattr(torch.cuda, NESTED, self.hidden)
            self.hidden = None

    def devices(self):
        message = self.agent._stats()
        # What goes on the wire: strict JSON (no NaN), and back.
        line = torchtop_agent._encode(message)
        json.loads(line.decode("utf-8"), parse_constant=self.fail)
        return {d["index"]: d["stats"] for d in message["devices"]}


class KeyTests(unittest.TestCase):
    def test_sent_keys_are_the_keys_the_hub_reads(self):
        with open(os.path.join(ROOT, "src", "protocol", "mod.rs")) as f:
            source = f.read()
        block = re.search(r"pub\(crate\) const STAT_KEYS: &\[&str\] = &\[(.*?)\];", source, re.S)
        self.assertIsNotNone(block, "STAT_KEYS not found in src/protocol/mod.rs")
        self.assertEqual(tuple(re.findall(r'"([^"]+)"', block.group(1))), torchtop_agent.SENT_STATS)

    def test_every_sent_key_is_a_memory_stats_key(self):
        reset_fake_torch()
        torch.cuda._fake_init([0])
        flat = torch.cuda.memory_stats(0)
        self.assertEqual(len(flat), 122)
        missing = set(torchtop_agent.SENT_STATS + torchtop_agent._OWN_STATS) - set(flat)
        self.assertFalse(missing)

    def test_picking_from_the_nested_dict_equals_picking_from_the_flat_one(self):
        reset_fake_torch()
        torch.cuda._fake_init([0])
        nested = torch.cuda.memory_stats_as_nested_dict(0)
        # A value of its own for every key, so that a key read from the wrong place shows.
        counter = iter(range(1000, 2000))

        def renumber(node):
            return {k: renumber(v) if isinstance(v, dict) else next(counter) for k, v in node.items()}

        nested = renumber(nested)
        flat = flatten_like_torch(nested)
        picked = torchtop_agent._pick_nested(nested)
        self.assertEqual(picked, torchtop_agent._pick_flat(flat))
        self.assertEqual(picked, {k: flat[k] for k in torchtop_agent.SENT_STATS + torchtop_agent._OWN_STATS})


class ReadingTests(StatsCase):
    def test_reads_the_nested_dict_and_never_memory_stats(self):
        torch.cuda._fake_init([0, 1])
        devices = self.devices()
        self.assertEqual(sorted(devices), [0, 1])
        self.assertEqual(sorted(stats_calls()), [(NESTED, 0), (NESTED, 1)])
        self.assertEqual(sorted(devices[0]), sorted(torchtop_agent.SENT_STATS))

    def test_without_the_nested_function_memory_stats_gives_the_same_figures(self):
        torch.cuda._fake_init([0, 1])
        nested_figures = self.devices()
        reset_fake_torch()
        torch.cuda._fake_init([0, 1])
        self.hide_nested()
        flat_figures = torchtop_agent._Agent(os.path.join(self.tmp, "y.sock"), 1000)._stats()
        self.assertIn(("memory_stats", 0), stats_calls())
        self.assertEqual({d["index"]: d["stats"] for d in flat_figures["devices"]}, nested_figures)
        self.assertEqual(nested_figures[1]["reserved_bytes.all.current"], 2 * 100 * (1 << 20) + (1 << 20))

    def test_a_failing_nested_function_falls_back_to_memory_stats_for_good(self):
        torch.cuda._fake_init([0])
        real = getattr(torch.cuda, NESTED)
        failures = []

        def broken(device=None):
            failures.append(device)
            raise RuntimeError("no such binding in this build")

        setattr(torch.cuda, NESTED, broken)
        try:
            first = self.devices()
            second = self.devices()
        finally:
            setattr(torch.cuda, NESTED, real)
        self.assertEqual(failures, [0], "tried once, then memory_stats only")
        self.assertEqual(sorted(first[0]), sorted(torchtop_agent.SENT_STATS))
        self.assertGreater(second[0]["allocated_bytes.all.current"], first[0]["allocated_bytes.all.current"])
        self.assertTrue(any("memory_stats_as_nested_dict failed" in line for line in self.agent.log))

    def test_when_both_fail_the_device_is_skipped_and_the_nested_function_kept(self):
        torch.cuda._fake_init([0])
        real_nested, real_flat = getattr(torch.cuda, NESTED), torch.cuda.memory_stats

        def broken(device=None):
            raise RuntimeError("invalid device")

        setattr(torch.cuda, NESTED, broken)
        torch.cuda.memory_stats = broken
        try:
            self.assertEqual(self.devices(), {})
        finally:
            setattr(torch.cuda, NESTED, real_nested)
            torch.cuda.memory_stats = real_flat
        self.assertFalse(self.agent.flat_stats_only, "a failure of both says nothing about the nested one")
        self.assertEqual(sorted(self.devices()), [0])

    def test_own_keys_decide_use_but_are_not_sent(self):
        torch.cuda._fake_init([])
        torch.cuda._fake_set(1, "num_device_alloc", 1)  # everything freed, but it was used
        devices = self.devices()
        self.assertEqual(sorted(devices), [1])
        for key in torchtop_agent._OWN_STATS:
            self.assertNotIn(key, devices[1])


class MalformedTests(StatsCase):
    def test_malformed_entries_read_as_missing(self):
        torch.cuda._fake_init([0])
        torch.cuda._fake_set(0, "allocated_bytes", "a string where a dict belongs")
        torch.cuda._fake_set(0, "reserved_bytes.all", None)
        torch.cuda._fake_set(0, "num_ooms", True)
        torch.cuda._fake_set(0, "num_alloc_retries", float("nan"))
        torch.cuda._fake_set(0, "max_split_size", "x")
        torch.cuda._fake_set(0, "segment.all.current", 2.5)
        stats = self.devices()[0]
        for gone in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                     "reserved_bytes.all.peak", "num_ooms", "num_alloc_retries", "max_split_size"):
            self.assertNotIn(gone, stats)
        self.assertEqual(stats["segment.all.current"], 2.5)
        self.assertIn("active_bytes.all.current", stats, "the rest is read as usual")

    def test_a_dict_that_is_not_one_gives_no_figures_and_no_crash(self):
        torch.cuda._fake_init([0])
        self.assertIn(0, self.devices())
        for garbage in (["not", "a", "dict"], 42, "text", {"allocated_bytes": [1, 2]}):
            torch.cuda._stats_garbage = garbage
            # A device in use stays listed, with every figure N/A; a device never seen is not
            # listed on the strength of garbage.
            self.assertEqual(self.devices(), {0: {}}, garbage)
            fresh = torchtop_agent._Agent(os.path.join(self.tmp, "z.sock"), 1000)
            try:
                self.assertEqual(fresh._stats()["devices"], [], garbage)
            finally:
                fresh.close_all(False)
        torch.cuda._stats_garbage = None
        self.assertIn("allocated_bytes.all.current", self.devices()[0])

    def test_malformed_stats_reach_a_monitor_as_missing_keys(self):
        torch.cuda._fake_init([0])
        torch.cuda._fake_set(0, "reserved_bytes", {"all": "x"})
        path = torchtop_agent.start(interval_ms=20, socket_dir=os.path.join(self.tmp, "sockets"))
        self.assertIsNotNone(path)
        client = Client(path)
        try:
            stats = client.read_until(lambda m: m["type"] == "stats" and m["devices"])
            client.read_until(lambda m: m["type"] == "stats" and m["seq"] > stats["seq"] + 2)
        finally:
            client.close()
            torchtop_agent.stop()
        self.assertNotIn("reserved_bytes.all.current", stats["devices"][0]["stats"])
        self.assertIn("allocated_bytes.all.current", stats["devices"][0]["stats"])


if __name__ == "__main__":
    unittest.main()
