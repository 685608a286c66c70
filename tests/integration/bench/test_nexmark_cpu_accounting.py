"""bench/nexmark/run.py counts the CPU of every process of a run of ours: the slots (forked by
the engine's fork server, never waited for by the process that runs the job, so
``getrusage(RUSAGE_CHILDREN)`` missed them) as well as the job master.

Each test burns a known amount of CPU in a process that the measuring process never waits
for (a slot; a forked grandchild), measured by that process itself (``time.process_time``:
its own ``/proc`` CPU time), and asserts that the run's ``cpu_s`` holds it. Without the
slots' share the figure is the master's alone and the assertion fails.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

pytest.importorskip("psutil")
cloudpickle = pytest.importorskip("cloudpickle")

from bench.nexmark import generator, queries  # noqa: E402
from bench.nexmark import run as nexmark  # noqa: E402

#: CPU seconds burnt in the slot (or grandchild); the meter samples every 100 ms and may miss
#: a process's last sample interval, hence the margin below
BURN_S = 1.5
COUNTED_S = 1.2


def _burn_query(burn_s: float):
    """A query whose slot spends ``burn_s`` CPU seconds (its own process time) on its first
    batch and passes the batches on."""

    def query(events, parallelism):
        state = {"burnt": False}

        def burn(batch):
            import time

            if not state["burnt"]:
                state["burnt"] = True
                t0 = time.process_time()
                while time.process_time() - t0 < burn_s:
                    pass
            return batch

        return events.map_batches(burn, name="burn")

    return query


@pytest.mark.timeout(180)
def test_ours_cpu_s_counts_the_slot_processes(tmp_path, monkeypatch):
    monkeypatch.delenv("CKPT_SLOT_FORK_SERVER", raising=False)  # the default: forked slots
    for m in (generator, queries):
        cloudpickle.register_pickle_by_value(m)
    path = str(tmp_path / "events")
    generator.write_parquet(path, 2000, config=generator.NexmarkConfig(events_per_second=100),
                            events_per_file=2000)
    monkeypatch.setitem(queries.QUERIES, "burn", _burn_query(BURN_S))

    r = nexmark.ours_child("burn", path, "heap", 10, "local")

    assert r["events"] == 2000
    # the slot's burn is outside this process: only a meter of every process can see it
    assert r["cpu_s"] - r["master_cpu_s"] >= COUNTED_S, r
    assert r["events_per_cpu_s"] == pytest.approx(2000 / r["cpu_s"])


@pytest.mark.timeout(60)
def test_child_counts_processes_the_child_never_waits_for(tmp_path):
    """run.py's ``--child`` path: the parent's meter covers a grandchild that the child forks
    and never reaps, less the CPU the child reports as spent before its run."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, time
        pid = os.fork()
        if pid == 0:
            t0 = time.process_time()
            while time.process_time() - t0 < {BURN_S}:
                pass
            os._exit(0)
        # not waited for: a zombie until this process exits
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            time.sleep(0.05)
        time.sleep(0.3)  # the meter's last samples
        print("RESULT " + json.dumps({{"events": 1000, "cpu_before_run_s": 0.0}}), flush=True)
    """))

    r = nexmark.child([sys.executable, str(script)], timeout=50, cpu=True)

    assert r["cpu_s"] >= COUNTED_S, r
    assert r["events_per_cpu_s"] == pytest.approx(1000 / r["cpu_s"])


def test_cpu_report_takes_no_run_that_missed_the_slots(tmp_path):
    """A run.py result without ``master_cpu_s`` counted the master alone (run.py between the
    fork server and the per-process meter): cpu_report refuses to merge it."""
    import json

    from bench.nexmark import cpu_report

    run = {"engine": "ours", "query": "q0", "backend": "heap", "events": 2_000_000,
           "cpu_s": 0.7, "loadavg_before": [1.0, 1.0, 1.0]}
    for name, runs in (("big.json", [run]), ("small.json", [{**run, "events": 20_000,
                                                              "master_cpu_s": 0.5}])):
        (tmp_path / name).write_text(json.dumps({"commands": ["x"], "runs": runs}))
    out = tmp_path / "out.json"

    with pytest.raises(SystemExit, match="big.json: runs without master_cpu_s"):
        cpu_report.main(["--runs", str(tmp_path / "big.json"), "--startup",
                         str(tmp_path / "small.json"), "--out", str(out)])
    assert not out.exists()

    (tmp_path / "big.json").write_text(json.dumps(
        {"commands": ["x"], "runs": [{**run, "master_cpu_s": 0.5, "cpu_s": 3.0}]}))
    cpu_report.main(["--runs", str(tmp_path / "big.json"), "--startup",
                     str(tmp_path / "small.json"), "--out", str(out)])
    assert json.loads(out.read_text())["runs"][0]["cpu_s"] == 3.0
