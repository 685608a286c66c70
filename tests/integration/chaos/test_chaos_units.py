"""The chaos harness's own parts, without running a job: seeded fault plans, committed rows
in commit order, update streams and changelogs reduced to their result, the DuckDB
reference against a direct computation over the same events."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from airflow_checkpoint_provider.engine.connectors.sink_names import part_file_name
from bench.chaos.catalogue import Output
from bench.chaos.compare import as_multiset, committed_rows, difference
from bench.chaos.faults import KILL_KINDS, plan


def test_a_plan_is_a_function_of_the_seed_and_the_cell():
    a = plan(7, "q4/local/heap/aligned", "local", 8.0, 10_000)
    assert [f.to_dict() for f in a] == [
        f.to_dict() for f in plan(7, "q4/local/heap/aligned", "local", 8.0, 10_000)
    ]
    plans = {
        json.dumps([f.to_dict() for f in plan(s, "q4/local/heap/aligned", "local", 8.0, 10_000)])
        for s in range(20)
    }
    assert len(plans) > 15  # seeds draw different faults
    for s in range(50):
        for f in plan(s, "c", "spark", 8.0, 100):
            assert f.kind in (*KILL_KINDS["spark"], "raise")
            assert 0 <= f.at <= 0.9 * 8.0 and 0 <= f.point < 100


def test_a_driver_kill_cell_kills_only_drivers_and_its_id_parses_back():
    from bench.chaos.__main__ import all_cells
    from bench.chaos.run import Cell

    for s in range(30):
        faults = plan(s, "q7+q19/spark/heap/aligned/driver-kills", "spark", 8.0, 100,
                      driver_only=True)
        assert faults and all(f.kind == "driver" for f in faults)
    cells = all_cells()
    driver_cells = [c for c in cells if c.kills == "driver"]
    assert driver_cells and all(c.runner == "spark" for c in driver_cells)
    assert {c.pipeline for c in driver_cells} == {"q7+q19", "q0+q18+q19"}
    for c in cells:
        assert Cell.parse(c.id) == c
    assert Cell.parse("q4/local/heap/aligned").id == "q4/local/heap/aligned"


def test_every_cell_runs_the_default_settings_and_multi_query_cells_share_one_source(tmp_path):
    """Issue 51: the matrix runs what users run: buffer debloating and the other checkpoint
    settings at their defaults (the run's backend, mode and interval aside)."""
    import dataclasses

    from airflow_checkpoint_provider.engine import CheckpointConfig
    from bench.chaos.catalogue import CATALOGUE, BuildContext

    defaults = CheckpointConfig()
    own = {"interval_ms", "directory", "unaligned", "savepoint_directory", "mode"}
    for e in CATALOGUE.values():
        if e.group == "cdc":
            continue  # needs the harness's PostgreSQL server
        # Kafka cells: what the harness passes (building a pipeline connects to no broker)
        extra = ({"bootstrap": "127.0.0.1:9", "in": "in", "out": "out", "rows": "rows",
                  "agg": "agg", "stop_at": [["in", 0, 10]]} if e.group == "kafka" else {})
        p = e.make(BuildContext(str(tmp_path / e.name), extra=extra))
        for f in dataclasses.fields(defaults):
            if f.name not in own:
                assert getattr(p.checkpoint, f.name) == getattr(defaults, f.name), (e.name, f.name)
    multi = CATALOGUE["q0+q18+q19"]
    assert multi.queries == ("q0", "q18", "q19")
    assert [o.path for o in multi.outputs] == ["out/q0", "out/q18", "out/q19"]
    graph = multi.make(BuildContext(str(tmp_path / "multi"))).execution_graph()
    assert len([v for v in graph.vertices if v.is_source]) == 1


def test_an_unfinished_run_is_a_failure_counted_in_the_summary_and_the_report(tmp_path):
    from bench.chaos.__main__ import summary
    from bench.chaos.report import write_report

    fault = {"kind": "driver", "fired_at": 1.0, "landed": "processing"}
    runs = [
        {"cell": "q7+q19/spark/heap/aligned/driver-kills", "pipeline": "q7+q19",
         "group": "nexmark-multi", "reference": "duckdb", "runner": "spark", "backend": "heap", "mode": "aligned",
         "seed": 1001, "status": "UNFINISHED", "ok": False, "differences": {},
         "faults": [fault], "seconds": 690.0, "failure_reason": "no end within ...",
         "replay": "r", "time": 2e9},
        {"cell": "q7/local/heap/aligned", "pipeline": "q7", "group": "nexmark",
         "runner": "local", "backend": "heap", "mode": "aligned", "seed": 1001,
         "status": "FINISHED", "ok": True, "differences": {}, "faults": [fault],
         "seconds": 20.0, "replay": "r", "time": 2e9},
    ]
    line = summary(runs)
    assert "2 killed runs" in line and "1 unfinished" in line and "1 failed" in line
    for r in runs:
        r.update(settings="default", revision="abc")
    results = tmp_path / "chaos.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    write_report(str(results), str(tmp_path / "CHAOS.md"))
    text = (tmp_path / "CHAOS.md").read_text()
    assert (
        "**2 killed runs on the default settings: 0 with committed rows that differ from "
        "the reference, 1 unfinished, 1 failed.**"
    ) in text
    assert "| q7+q19/spark/heap/aligned/driver-kills | duckdb | 1 | 0 | 1 | 0 |" in text


def _write(directory, job, checkpoint, subtask, rows):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, part_file_name("out", job, checkpoint, subtask)), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_the_last_row_per_key_follows_jobs_then_checkpoints(tmp_path):
    d = str(tmp_path / "out")
    job1, job2 = "a" * 32, "b" * 32  # job2 restored job1 after a driver kill
    _write(d, job2, 3, 0, [{"k": 1, "n": 4}])
    _write(d, job1, 12, 0, [{"k": 1, "n": 2}, {"k": 1, "n": 3}, {"k": 2, "n": 1}])
    _write(d, job1, 9, 1, [{"k": 1, "n": 1}])
    rows = committed_rows(d, {job1: 0, job2: 1})
    assert [r["n"] for r in rows if r["k"] == 1] == [1, 2, 3, 4]
    got = as_multiset(rows, Output("out", "upsert", ("k",)))
    assert got == Counter({(("k", 1), ("n", 4)): 1, (("k", 2), ("n", 1)): 1})
    # without the job order (checkpoint ids restart in the new job) the result is wrong
    wrong = as_multiset(committed_rows(d, {job1: 1, job2: 0}), Output("out", "upsert", ("k",)))
    assert wrong != got


def test_a_changelog_leaves_what_was_not_retracted_and_appends_keep_duplicates():
    rows = [
        {"_op": "+I", "o": 1, "u": "x"},
        {"_op": "-U", "o": 1, "u": "x"},
        {"_op": "+U", "o": 1, "u": "y"},
        {"_op": "+I", "o": 2, "u": "x"},
        {"_op": "-D", "o": 2, "u": "x"},
    ]
    assert as_multiset(rows, Output("j", "changelog")) == Counter({(("o", 1), ("u", "y")): 1})
    dup = [{"a": 1, "t": "2026-01-01T00:00:00.010"}, {"a": 1, "t": "2026-01-01T00:00:00.010"}]
    got = as_multiset(dup, Output("x"), columns=("a", "t"))
    want = as_multiset([{"a": 1, "t": "2026-01-01T00:00:00.010"}], Output("x"), columns=("a", "t"))
    d = difference(got, want)
    assert (d["missing"], d["extra"]) == (0, 1)  # a row committed twice is a difference


def test_times_and_floats_compare_across_json_and_duckdb():
    from datetime import datetime

    json_row = {"date_time": "2026-01-01T00:00:00.010", "price": 0.1 + 0.2}
    sql_row = {"date_time": datetime(2026, 1, 1, 0, 0, 0, 10_000), "price": 0.3}
    cols = ("date_time", "price")
    assert as_multiset([json_row], Output("x"), cols) == as_multiset([sql_row], Output("x"), cols)


@pytest.mark.timeout(60)
def test_duckdb_reference_of_q2_and_q12_matches_a_direct_count():
    pytest.importorskip("duckdb")
    import numpy as np
    import pyarrow.compute as pc

    from bench.chaos.reference_duckdb import events_table, reference_rows
    from bench.nexmark.generator import NexmarkConfig

    config = NexmarkConfig(events_per_second=500)
    events = events_table(3000, config)
    bids = events.filter(pc.equal(events.column("event_type"), 2))
    auction = bids.column("auction").to_numpy()
    want = Counter(
        zip(
            auction[auction % 123 == 0].tolist(),
            bids.column("price").to_numpy()[auction % 123 == 0].tolist(),
            strict=True,
        )
    )
    got = Counter((r["auction"], r["price"]) for r in reference_rows("q2", 3000, config))
    assert got == want and sum(got.values()) > 0
    per_bidder = Counter(bids.column("bidder").to_numpy().tolist())
    q12 = {r["bidder"]: r["bid_count"] for r in reference_rows("q12", 3000, config)}
    assert q12 == dict(per_bidder) and np.sum(list(q12.values())) == bids.num_rows


def test_where_a_fault_landed_from_the_metadata_db_and_published_files(tmp_path):
    import time
    from datetime import UTC, datetime

    from airflow_checkpoint_provider.engine.catalog import MetadataStore
    from bench.chaos.faults import landing

    def at(t: float) -> datetime:
        return datetime.fromtimestamp(t, UTC)

    job = "c" * 32
    out = str(tmp_path / "out")
    with MetadataStore(f"sqlite:///{tmp_path / 'meta.db'}") as store:
        store.create_job(job_id=job, job_name="j", parallelism=2)
        store.start_attempt(job, 0, restored_checkpoint_id=None, restored_from=None)
        base = time.time()

        def checkpoint(n, trigger, complete=None, final=False):
            store.add_pending_checkpoint(
                job,
                n,
                kind="CHECKPOINT",
                trigger_time=at(trigger),
                location=f"chk-{n}",
                is_final=final,
            )
            if complete is not None:
                store.complete_checkpoint(
                    job,
                    n,
                    complete_time=at(complete),
                    duration_ms=1,
                    state_size=0,
                    checkpointed_size=0,
                    task_stats=[],
                )

        checkpoint(1, base + 1.0, base + 1.2)
        assert landing(base + 0.5, store, [out]) == "before-first-checkpoint"
        assert landing(base + 1.25, store, [out]) == "during-commit"  # no files: 100 ms
        assert landing(base + 1.6, store, [out]) == "processing"
        checkpoint(2, base + 2.0)  # still pending
        assert landing(base + 2.5, store, [out]) == "during-checkpoint"
        checkpoint(3, base + 3.0, final=True)  # every task reached its end of input
        assert landing(base + 3.5, store, [out]) == "after-sources-ended"
    # a part file of the last completed checkpoint published after the fault: the kill cut
    # its commit short (the restarted job published it); once published, it is over
    with MetadataStore(f"sqlite:///{tmp_path / 'meta2.db'}") as store:
        store.create_job(job_id=job, job_name="j", parallelism=2)
        now = time.time()
        store.add_pending_checkpoint(
            job, 7, kind="CHECKPOINT", trigger_time=at(now - 2), location="chk-7"
        )
        store.complete_checkpoint(
            job,
            7,
            complete_time=at(now - 1),
            duration_ms=1,
            state_size=0,
            checkpointed_size=0,
            task_stats=[],
        )
        fault = time.time()
        time.sleep(0.05)
        _write(out, job, 7, 0, [{"k": 1}])
        assert landing(fault, store, [out]) == "during-commit"
        assert landing(time.time() + 0.5, store, [out]) == "processing"


def test_a_driver_kills_restart_delay_is_the_start_of_the_next_attempt(tmp_path):
    """The seconds from a driver kill to the first attempt started after it, over every job
    of the run (a restore may create a new job row); none started: ``None``."""
    import time

    from airflow_checkpoint_provider.engine.catalog import MetadataStore
    from bench.chaos.faults import restart_delay

    with MetadataStore(f"sqlite:///{tmp_path / 'meta.db'}") as store:
        store.create_job(job_id="a" * 32, job_name="j", parallelism=2)
        store.start_attempt("a" * 32, 0, restored_checkpoint_id=None, restored_from=None)
        kill = time.time()
        assert restart_delay(kill, store) is None
        time.sleep(0.3)
        store.create_job(job_id="b" * 32, job_name="j2", parallelism=2)
        store.start_attempt("b" * 32, 0, restored_checkpoint_id=None, restored_from=None)
        delay = restart_delay(kill, store)
        assert delay is not None and 0.25 <= delay < 30
        # after a JVM kill: the attempts before the new driver's start are not its
        assert restart_delay(kill, store, after=time.time()) is None


@pytest.mark.parametrize(
    "name",
    [
        "session-windows",
        "session-windows-row",
        "top-n",
        "count-distinct",
        "join-broadcast-temporal",
    ],
)
def test_every_catalogue_builder_builds_its_pipeline(tmp_path, name):
    """The builders of the tests' pipelines (one factory since they differed only in names)
    give a pipeline with the run's backend, checkpoint mode and the seeded raise points."""
    from bench.chaos.catalogue import BuildContext, entry

    ctx = BuildContext(str(tmp_path), backend="rocksdb", unaligned=True, raise_points=[10])
    p = entry(name).make(ctx)
    assert p.state_backend == "rocksdb" and p.checkpoint.unaligned
    assert p.execution_graph().vertices


def test_the_chaos_nexmark_source_emits_bench_nexmarks_events():
    """The chaos matrix's Nexmark source builds its channel URLs in one vectorized pass
    (bench/nexmark's generator hashes them one by one: ~8 s per split reader) and shares one
    generator per process: the URLs must be bench/nexmark's, and a reader restored at a
    position must emit the events of bench/nexmark's ids."""
    import numpy as np

    from bench.chaos.nexmark_source import ChaosNexmarkSource, FastNexmarkGenerator, generator
    from bench.nexmark.generator import NexmarkConfig, NexmarkGenerator

    config = NexmarkConfig(seed=3, events_per_second=500)
    fast = FastNexmarkGenerator(config)
    assert fast._base_urls(700) == NexmarkGenerator._base_urls(fast, 700)
    assert any("_/" in u or u.endswith("_/item.htm?query=1") for u in fast._base_urls(700))
    assert generator(config) is generator(config)
    source = ChaosNexmarkSource(1_000, config=config, splits=4)
    reader = source.open_split("nexmark-1", 37, None)
    got = reader.read_batch(50)
    assert got.equals(fast.batch(1 + 4 * np.arange(37, 87, dtype=np.int64)))
    assert reader.position() == 87


def test_fill_picks_the_least_run_cell_with_a_seed_never_recorded_for_it():
    from bench.chaos.__main__ import next_run
    from bench.chaos.run import Cell

    a, b = Cell("q1"), Cell("q2", backend="rocksdb")
    d = {"settings": "default"}
    records = [{"cell": a.id, "seed": s, **d} for s in (1, 2, 1500)]
    records += [{"cell": b.id, "seed": 3, **d}]
    assert next_run([a, b], records, 7) == (b, 1001)
    records += [{"cell": b.id, "seed": 1001, **d}, {"cell": b.id, "seed": 1002, **d}]
    assert next_run([a, b], records, 7) == (a, 1501)
    # runs the environment broke (ModuleNotFoundError, ...) do not count; their seeds do
    records += [{"cell": b.id, "seed": 1600, "environment": "No module named 'pyarrow'", **d}] * 9
    assert next_run([a, b], records, 7) == (a, 1501)
    # nor runs on other settings (older runs without the marker): their seeds do
    records += [{"cell": a.id, "seed": 1700}] * 9
    assert next_run([a, b], records, 7) == (a, 1701)


def test_a_driver_gets_no_engine_setting_of_the_callers_environment():
    """Every chaos run is on the default settings: a ``CKPT_*`` variable the caller
    exported (a heartbeat timeout, debloating off ...) never reaches a driver; what the
    harness sets is not an engine setting."""
    from bench.chaos.run import DRIVER_ENV, SETTINGS, driver_env

    env = driver_env({"CKPT_HEARTBEAT_TIMEOUT_S": "2", "CKPT_X": "1", "HOME": "/h"})
    assert env == {"HOME": "/h", **DRIVER_ENV}
    assert not any(k.startswith("CKPT_") for k in DRIVER_ENV)
    assert SETTINGS == "default"


@pytest.mark.timeout(60)
def test_the_cpu_meter_counts_a_sessions_processes_also_after_its_leader_died():
    """A run's CPU is that of its drivers' sessions: a grandchild whose parent (the driver)
    was killed still counts; a process of another session does not."""
    import signal
    import subprocess
    import sys
    import time

    from bench.chaos.cpu import CpuMeter

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', {burn!r} + 'time.sleep(30)'])\n"
            "time.sleep(30)",
        ],
        start_new_session=True,
    )
    other = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(30)"])
    meter = CpuMeter(interval=0.05)
    meter.add_session(leader.pid)
    try:
        deadline = time.monotonic() + 30
        while meter.seconds() < 0.5 and time.monotonic() < deadline:
            meter.sample()
            time.sleep(0.05)
        leader.send_signal(signal.SIGKILL)
        leader.wait(10)
        time.sleep(0.2)
        meter.sample(force=True)
        assert 0.5 <= meter.seconds() < 1.2  # not the other session's 0.6 s
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        other.kill()
        other.wait(10)


def test_the_report_counts_the_runs_on_the_default_settings_by_family_and_older_runs_apart(
    tmp_path,
):
    """The top of CHAOS.md counts the killed runs, differences and unfinished runs on the
    current settings (``settings: default`` of committed code), with the multi-query,
    driver-kill and Kafka cells apart; older runs on other settings are one line, and runs
    on a working tree with uncommitted engine edits are not counted."""
    import calendar
    import time

    from bench.chaos.report import LAST_FIX, write_report
    from bench.chaos.run import code_revision

    fixed_at = calendar.timegm(time.strptime(LAST_FIX[1], "%Y-%m-%d %H:%M:%S"))
    kill = {"kind": "slot", "fired_at": 1.0, "landed": "processing"}
    driver = {"kind": "driver", "fired_at": 1.0, "landed": "processing", "restarted_s": 2.5}
    diff = {"out": {"missing": 3, "extra": 0, "expected": 10}}

    def run(seed, at, ok=True, cell="q1/local/heap/aligned", group="nexmark", **extra):
        return {
            "cell": cell,
            "pipeline": cell.split("/")[0],
            "group": group,
            "runner": cell.split("/")[1],
            "backend": "heap",
            "mode": "aligned",
            "seed": seed,
            "status": "FINISHED",
            "faults": [kill],
            "ok": ok,
            "differences": {} if ok else diff,
            "time": at,
            "replay": "r",
            "seconds": 1,
            **extra,
        }

    now = fixed_at + 10 * 86400
    cur = {"settings": "default", "revision": "aaaaaaaaaaaa"}
    rows = [
        run(1, fixed_at - 60, ok=False),
        run(2, fixed_at + 60),
        run(3, now, **cur),
        run(4, now + 1, cell="q7+q19/local/heap/aligned", group="nexmark-multi", **cur),
        run(5, now + 2, cell="q7+q19/spark/heap/aligned/driver-kills", group="nexmark-multi",
            **{**cur, "revision": "bbbbbbbbbbbb", "faults": [driver]}),
        run(6, now + 3, cell="kafka-sum/local/heap/aligned", group="kafka", **cur),
        # a half-edited working tree: not counted
        run(7, now + 4, ok=False, **{**cur, "revision": "bbbbbbbbbbbb+dirty"}),
    ]
    results = tmp_path / "chaos.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in rows))
    write_report(str(results), str(tmp_path / "CHAOS.md"))
    text = (tmp_path / "CHAOS.md").read_text()
    top = text.split("## The current runs per cell")[0]
    assert (
        "**4 killed runs on the default settings: 0 with committed rows that differ from "
        "the reference, 0 unfinished, 0 failed.**"
    ) in top
    assert "commits aaaaaaaaaaaa to bbbbbbbbbbbb (2 commits)" in top
    assert "1 runs on a working tree with uncommitted engine edits" in top
    assert "| driver-kill cells (multi-query on Spark, every kill a driver SIGKILL) | 1 | 1 | 1 |" in top
    assert "| multi-query cells (several queries on one source) | 1 | 1 | 1 |" in top
    assert "| Kafka cells | 1 | 1 | 1 |" in top
    assert "| Nexmark single-query cells | 1 | 1 | 1 | 0 | 0 | 0 |" in top
    assert "spark: 1 kills, the next attempt started a median 2.5 s" in top
    assert (
        "Earlier runs on other settings" in top
        and ": 2 runs, 2 killed runs, 1 with committed rows that differ, 0 unfinished, "
        "1 failed" in top
    )
    assert "after the last fix" in top and "1 runs, 1 killed runs, 0 failed" in top
    # the per-cell table holds the current runs only
    table = text.split("## The current runs per cell")[1]
    assert "| q1/local/heap/aligned | duckdb | 1 | 1 |" in table
    rev = code_revision()
    assert rev is None or len(rev.split("+")[0]) == 12


def test_a_difference_shows_rows_that_are_not_column_pairs():
    """A Kafka cell's multiset holds ``(key, "count", n)`` tuples: their difference is
    shown as lists, not refused (a run with differences crashed the harness)."""
    from collections import Counter

    from bench.chaos.compare import difference

    got = Counter({("k1", "count", 1): 1, ("k1", 7): 2})
    want = Counter({("k1", "count", 1): 1, ("k1", "count", 2): 1, ("k1", 7): 1})
    d = difference(got, want)
    assert (d["missing"], d["extra"]) == (1, 1)
    assert d["missing_examples"] == [["k1", "count", 2]] and d["extra_examples"] == [["k1", 7]]
    rows = Counter({(("a", 1), ("b", "x")): 1})
    assert difference(Counter(), rows)["missing_examples"] == [{"a": 1, "b": "x"}]
