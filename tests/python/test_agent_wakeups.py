"""When the agent's thread wakes: never while no monitor is connected, and seldom while the
training loop calls step(), which then reads and sends the stats on its own thread.

Why it matters: on a virtual machine a thread's wake-up can cost milliseconds of CPU, more than
the stats themselves (the README's agent line), and a training process runs for weeks.
"""

import threading
import time

from agent_testlib import reset_fake_torch, wait_for
from test_agent import AgentCase

import torch  # noqa: E402  (the stand-in)
import torchtop_agent  # noqa: E402


def voluntary_switches(thread):
    """The thread's voluntary context switches: one for each time it slept and woke."""
    with open("/proc/self/task/%d/status" % thread.native_id) as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line for thread %d" % thread.native_id)


class WakeupTests(AgentCase):
    def setUp(self):
        super().setUp()
        reset_fake_torch()
        torch.cuda._fake_init([0])

    def record_ticks(self):
        """Wraps the agent's tick: the list fills with the ident of each thread that ticks."""
        agent = torchtop_agent._agent
        ticks, tick = [], agent._tick

        def counted():
            ticks.append(threading.get_ident())
            tick()

        agent._tick = counted
        return ticks

    def test_no_wakeup_while_no_monitor_is_connected(self):
        path = self.start(interval_ms=20)
        thread = torchtop_agent._agent.thread
        time.sleep(0.2)  # past its first select
        before = voluntary_switches(thread)
        time.sleep(1.0)  # 50 intervals
        woke = voluntary_switches(thread) - before
        self.assertLessEqual(woke, 2, "the thread woke %d times in 50 intervals with no monitor" % woke)
        # A monitor that connects then is greeted at once, and gets stats every interval.
        c = self.connect(path)
        self.assertEqual(c.read()["type"], "hello")
        c.read_until(lambda m: m["type"] == "stats" and m["seq"] >= 4)

    def test_steps_tick_on_the_training_thread_and_the_thread_takes_over_when_they_stop(self):
        c = self.connect(self.start(interval_ms=50))
        c.read_until(lambda m: m["type"] == "stats")
        ticks = self.record_ticks()
        me = threading.get_ident()
        end = time.monotonic() + 1.0  # 20 intervals of steps
        while time.monotonic() < end:
            torchtop_agent.step()
            # Steps a fraction of an interval apart, and asleep between them: a thread that woke
            # at each deadline itself would tick before the step that comes a moment later.
            time.sleep(0.02)
        steps = torchtop_agent._agent.step_count
        from_steps = ticks.count(me)
        # Not a speed: a loaded machine may let the thread take over a few times.
        self.assertGreater(from_steps, len(ticks) - from_steps,
                           "%d of %d ticks came from step()" % (from_steps, len(ticks)))
        self.assertGreater(torchtop_agent._agent.step_tick_ns, 0)
        # The steps stop: the thread reads and sends again, with the last step's number.
        ticked_before = len(ticks)
        wait_for(lambda: len(ticks) >= ticked_before + 3, "ticks after the steps stopped")
        self.assertNotIn(me, ticks[ticked_before:])
        stats = c.read_until(lambda m: m["type"] == "stats" and m["step"] == steps)
        self.assertEqual(stats["devices"][0]["index"], 0)

    def test_a_step_a_moment_after_the_deadline_still_ticks(self):
        """Steps timed to come 5 ms after each deadline: a thread that ticked at its deadline
        whenever step() had not ticked yet would win that race at every interval."""
        c = self.connect(self.start(interval_ms=50))
        c.read_until(lambda m: m["type"] == "stats")
        agent = torchtop_agent._agent
        times, tick = [], agent._tick

        def counted():
            times.append((time.monotonic(), threading.get_ident()))
            tick()

        agent._tick = counted
        wait_for(lambda: times, "a first tick")
        me = threading.get_ident()
        for _ in range(12):
            last = times[-1][0]
            for at in (0.010, 0.030, 0.055):  # the deadline is at 0.050
                time.sleep(max(0.0, last + at - time.monotonic()))
                torchtop_agent.step()
            wait_for(lambda: times[-1][0] > last, "the next tick")
        from_steps = sum(1 for _, ident in times[1:] if ident == me)
        self.assertGreater(from_steps, (len(times) - 1) // 2,
                           "%d of %d ticks came from step()" % (from_steps, len(times) - 1))

    def test_the_thread_sleeps_past_its_interval_while_steps_tick(self):
        c = self.connect(self.start(interval_ms=50))
        c.read_until(lambda m: m["type"] == "stats")
        thread = torchtop_agent._agent.thread
        ticks = self.record_ticks()
        before = voluntary_switches(thread)
        end = time.monotonic() + 1.5  # 30 intervals of steps
        while time.monotonic() < end:
            torchtop_agent.step()
            time.sleep(0.005)
        woke = voluntary_switches(thread) - before
        # Once each 2 to 3 intervals (STEP_TICK_GRACE_INTERVALS), where it used to be each one.
        self.assertLess(woke, len(ticks) * 0.75, "the thread woke %d times for %d ticks" % (woke, len(ticks)))

    def test_a_command_is_answered_while_steps_tick(self):
        c = self.connect(self.start(interval_ms=50))
        c.read_until(lambda m: m["type"] == "stats")
        stop = threading.Event()

        def train():
            while not stop.is_set():
                torchtop_agent.step()
                time.sleep(0.002)

        trainer = threading.Thread(target=train)
        trainer.start()
        try:
            for cmd_id in range(1, 6):
                reply = c.command(cmd_id, "reset_peak")
                self.assertTrue(reply["ok"], reply)
            c.read_until(lambda m: m["type"] == "stats" and (m["step"] or 0) > 10)
        finally:
            stop.set()
            trainer.join()
