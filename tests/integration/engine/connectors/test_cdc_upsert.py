"""End to end, exactly once: PostgreSQL CDC -> upsert sink (PostgreSQL in another database of
the same server, Delta, Iceberg), and CDC -> retracting aggregate (emit="upsert") ->
PostgreSQL. Writer processes change the source table during the snapshot and the stream; a
slot and then the driver are SIGKILLed at seeded random points; ``restore="latest"``
resumes; a savepoint is restored at another parallelism. Once the writers stopped and the
job caught up, the target equals the source table (or its GROUP BY) row for row."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from cdc_pipelines import items_database, start_writers
from cdc_upsert_pipelines import (
    KINDS,
    cdc_upsert_pipeline,
    create_target,
    dsn,
    source_rows,
    target_rows,
)
from pipelines import Background
from repo_paths import SUPPORT_DIR

pytestmark = pytest.mark.slow
SUPPORT = str(SUPPORT_DIR)  # the helper modules
ROWS = 2_000

DRIVER = """
import json, sys
sys.path.insert(0, {tests!r})
from cdc_upsert_pipelines import cdc_upsert_pipeline
cdc_upsert_pipeline({root!r}, {url!r}, json.loads({target!r}), name={name!r},
                    kill_after={kill_after}).run()
"""


@pytest.fixture
def source(postgres_server):
    yield from items_database(postgres_server, ROWS, 50)


def _wait_for(condition, driver, what: str, timeout: float = 90, explain=lambda: "") -> None:
    """Poll ``condition`` every 0.25 s (a poll of the metadata DB costs ~13 ms of CPU; the
    driver's kill follows a random 0-2 s pause anyway)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert driver.poll() is None, f"the job ended: {what}\n{explain()}"
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s:\n{explain()}"
        time.sleep(0.25)


def _completed(root: str, name: str) -> int:
    """Checkpoints completed by every job of ``name`` so far."""
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    with MetadataStore("sqlite:///" + os.path.join(root, "meta.db")) as store:
        return sum(1 for j in store.list_jobs(job_name=name)
                   for c in store.list_checkpoints(j.job_id)
                   if c.status in ("COMPLETED", "SUBSUMED"))


def _join(procs) -> None:
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, "a writer process failed"


def _timeline(root: str, name: str) -> str:
    """Where the jobs of ``name`` spent their time (metadata DB): status, attempts and their
    failures, checkpoints triggered / completed and the slowest one. A stall's failure says
    which part stood still (start, checkpoints, or the sink's commits)."""
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    lines = []
    with MetadataStore("sqlite:///" + os.path.join(root, "meta.db")) as store:
        for j in sorted(store.list_jobs(job_name=name), key=lambda j: j.created_at):
            line = f"job {j.job_id[:8]} {j.status}, created {j.created_at:%H:%M:%S}"
            for a in store.list_attempts(j.job_id):
                line += f"; attempt {a.attempt} started {a.started_at:%H:%M:%S}"
                if a.failure_reason:
                    line += f" (ended: {a.failure_reason[:160]})"
            chks = sorted(store.list_checkpoints(j.job_id), key=lambda c: c.checkpoint_id)
            done = [c for c in chks if c.status in ("COMPLETED", "SUBSUMED")]
            if chks:
                line += (f"; {len(chks)} checkpoint(s) triggered {chks[0].trigger_time:%H:%M:%S}"
                         f"..{chks[-1].trigger_time:%H:%M:%S}, {len(done)} completed, slowest "
                         f"{max((c.duration_ms or 0) for c in chks)} ms, last "
                         f"{chks[-1].status}")
            lines.append(line)
    return "\n".join(lines)


def _running(bg: Background, root: str, name: str, timeout: float = 90):
    """The restored job, once RUNNING with a completed checkpoint; fails with the timeline.
    Measured (2026-11-27, seed 264594428, iceberg): 20-28 s to RUNNING at load 5-37, 33-64 s
    at load 40-47 (the slot processes import pyiceberg/pydantic/SQLAlchemy and load the
    catalog while CPU-starved), the first checkpoint 1-5 s later."""
    started = time.monotonic()
    try:
        job = bg.wait_running(timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc} within {timeout:.0f} s:\n{_timeline(root, name)}") from exc
    print(f"restored job RUNNING with a checkpoint after {time.monotonic() - started:.1f} s")
    return job


def _converged(target: dict, url: str, kind: str, timeout: float = 120, *,
               timeline=lambda: "") -> None:
    """Wait until the target equals the source (the job caught up); fail with the diff and
    the jobs' timeline. 120 s, twice the slowest healthy catch-up measured: 9-31 s after
    the writers' end at load 5-37, 34-56 s at load 40-47 (12 restores, 2026-11-27, iceberg,
    seed 264594428: every checkpoint completed; the time went to the Iceberg sink's
    copy-on-write commits, 5-22 s each at load 47); lost changes never converge, however
    long the wait."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        want, got = source_rows(url, kind), target_rows(target)
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print(f"{kind}: converged check after {time.monotonic() - started:.1f} s")
    missing = {k: v for k, v in want.items() if got.get(k) != v}
    extra = {k: v for k, v in got.items() if k not in want}
    assert not missing and not extra, (
        f"{kind}: {len(missing)} rows differ or are missing (e.g. "
        f"{list(missing.items())[:3]} vs {[got.get(k) for k in list(missing)[:3]]}), "
        f"{len(extra)} extra (e.g. {list(extra.items())[:3]}) after {timeout:.0f} s:\n"
        f"{timeline()}")
    assert len(want) > ROWS // 50 // 2


def _stop(bg: Background, job) -> str:
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    return req.result["location"]


def _no_prepared(target: dict) -> None:
    if target["kind"].startswith("postgres"):
        with psycopg.connect(dsn(target["where"])) as conn:
            left = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = "
                                "current_database()").fetchall()
        assert not left, f"prepared transactions left in the target: {left}"


@pytest.mark.timeout(480)
@pytest.mark.parametrize("kind", KINDS)
def test_cdc_into_an_upsert_sink_equals_the_source_under_kills_and_rescale(
        kind, source, postgres_server, tmp_path, monkeypatch):
    began = time.monotonic()
    seed = int(os.environ.get("CKPT_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (CKPT_TEST_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    root, name = str(tmp_path), f"cdc-up-{kind}"
    target = create_target(kind, root, postgres_server.create_database()
                           if kind.startswith("postgres") else None)
    if kind == "postgres-agg":  # retractions carry the old v (the aggregated group)
        with psycopg.connect(dsn(source), autocommit=True) as conn:
            conn.execute("ALTER TABLE items REPLICA IDENTITY FULL")
    # 1. writers during the snapshot and the stream; a slot kills itself, then (once a
    # checkpoint completed after that) the driver
    stop_writers = os.path.join(root, "stop-writers")
    procs = start_writers(source, 60, rng.sample(range(1000), 2), stop_writers)
    kill_after = rng.randint(100, 1_200)
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(tests=SUPPORT, root=root, url=source, name=name,
                                             target=json.dumps(target), kill_after=kill_after)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([SUPPORT, os.environ.get("PYTHONPATH", "")])})
    try:
        _wait_for(lambda: os.path.exists(os.path.join(root, "killed")), driver,
                  f"no slot was killed (seed {seed})", explain=lambda: _timeline(root, name))
        done = _completed(root, name)
        _wait_for(lambda: _completed(root, name) > done, driver,
                  f"no checkpoint completed after the slot's kill (seed {seed})",
                  explain=lambda: _timeline(root, name))
        time.sleep(rng.uniform(0.0, 2.0))
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
        open(stop_writers, "w").close()
    _join(procs)
    # 2. restore the latest checkpoint; writers while it streams
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "2")
    time.sleep(2.5)
    bg = Background(cdc_upsert_pipeline(root, source, target, name=name), restore="latest")
    job = _running(bg, root, name)
    _join(start_writers(source, 2, [rng.randrange(1000, 2000)]))
    _converged(target, source, kind, timeline=lambda: _timeline(root, name))
    savepoint = _stop(bg, job)
    assert bg.result().restored_from, f"seed {seed}"
    # 3. restore the savepoint at another parallelism; writers again
    bg = Background(cdc_upsert_pipeline(root, source, target, name=name, source_parallelism=3,
                                        parallelism=3), restore=savepoint)
    job = _running(bg, root, name)
    _join(start_writers(source, 1.5, [rng.randrange(2000, 3000)]))
    _converged(target, source, kind, timeline=lambda: _timeline(root, name))
    _stop(bg, job)
    _converged(target, source, kind, timeout=0)
    _no_prepared(target)
    print(f"{kind}: {time.monotonic() - began:.0f} s")
