"""A slot ends its own process a few seconds after its coordinator is gone, even when one
of its tasks is stuck in user code (issue 35 #3): nothing else would end it on a cluster,
and on Spark it would hold its executor core for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from pipelines import descendant_pids, process_alive
from repo_paths import SUPPORT_DIR

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = str(SUPPORT_DIR)  # the helper modules

DRIVER = """
import sys
sys.path[:0] = [{here!r}, {tests!r}]
from spark_kills import stuck_pipeline
stuck_pipeline({root!r}, fail_others=False, num_records=200_000).run()
"""


@pytest.mark.timeout(120)
def test_a_slot_stuck_in_user_code_ends_its_process_when_its_driver_is_killed(workdir):
    env = {
        **os.environ,
        "CKPT_SLOT_ORPHAN_EXIT_SECONDS": "2",
        "PYTHONPATH": os.pathsep.join([HERE, SUPPORT, os.environ.get("PYTHONPATH", "")]),
    }
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(here=HERE, tests=SUPPORT, root=str(workdir))],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    slots: list[int] = []
    try:
        marker = workdir / "stuck.pid"
        deadline = time.monotonic() + 90
        while not marker.exists() and time.monotonic() < deadline:
            assert driver.poll() is None, "the job ended before a slot got stuck"
            time.sleep(0.1)
        assert marker.exists(), "no slot got stuck within 90 s"
        stuck = int(marker.read_text().split()[0])
        slots = descendant_pids(driver.pid, b"engine.runtime.host.slot")
        assert stuck in slots, (stuck, slots)
        driver.send_signal(signal.SIGKILL)  # the coordinator is gone, without a word
        driver.wait(10)
        t0 = time.monotonic()
        while any(process_alive(p) for p in slots) and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        left = [p for p in slots if process_alive(p)]
        # 2 s of grace, plus the time to notice the closed connection on a loaded machine
        assert not left, f"slot processes {left} outlived their driver by 15 s (stuck: {stuck})"
    finally:
        if driver.poll() is None:
            driver.kill()
        for p in slots:
            if process_alive(p):
                os.kill(p, signal.SIGKILL)
