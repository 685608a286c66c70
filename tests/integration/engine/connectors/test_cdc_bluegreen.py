"""Blue-green upgrade of a CDC job (issue 37, item 2) on a real PostgreSQL: green gets its
own slot, copied from blue's before the hand-over savepoint; the fenced green reads it and
never acknowledges; at the cut-over green restores blue's final savepoint and streams from
its own slot. With writers running throughout, the published changelog (blue's then green's)
replays to the source table row for row: 0 lost, 0 duplicated. A fenced green pointed at
blue's slot is refused before it starts (on main it acknowledged past blue)."""

from __future__ import annotations

import os
import re
import time

import pytest
from cdc_pipelines import cdc_pipeline, committed_in_order, items_database, replay, source_table
from cdc_pipelines import start_writers as writers
from click.testing import CliRunner
from pipelines import Background
from test_cdc_slots import _confirmed_text

from airflow_checkpoint_provider.engine.catalog import SlotInUseError
from airflow_checkpoint_provider.engine.cli import main
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import job_object_name


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, 2_000, 10)


@pytest.mark.timeout(300)
def test_blue_green_cut_over_of_a_cdc_job_loses_and_duplicates_nothing(db, tmp_path):
    root, out = str(tmp_path), str(tmp_path / "out")
    blue_slot, green_slot = job_object_name("cdc-blue"), job_object_name("cdc-green")
    procs = writers(db, 12, [11, 12])
    blue_bg = Background(cdc_pipeline(root, db, name="cdc-blue", out=out))
    blue = blue_bg.wait_running(timeout=90)
    # the hand-over: green's own slot first (a copy of blue's), then blue's savepoint
    res = CliRunner().invoke(main, ["cdc", "copy-slot", "--url", db, "--from", blue_slot,
                                    "--to-job", "cdc-green"])
    assert res.exit_code == 0 and f"created slot {green_slot} from {blue_slot}" in res.output, \
        res.output
    sp = blue_bg.request(blue.job_id, "SAVEPOINT", {})
    assert sp.status == "SUCCEEDED", sp.error
    # a fenced green pointed at blue's slot is refused (it would acknowledge past blue)
    with pytest.raises(SlotInUseError, match=f"{blue_slot!r} .* belongs to job cdc-blue"):
        cdc_pipeline(root, db, name="cdc-green-shared", out=out, slot=blue_slot).run(
            restore=sp.result["location"], fence_sinks=True)
    green_bg = Background(cdc_pipeline(root, db, name="cdc-green", out=out),
                          restore=sp.result["location"], fence_sinks=True)
    green = green_bg.wait_running(min_checkpoints=3, timeout=120)
    held_at = _confirmed_text(db, green_slot)
    time.sleep(3)  # fenced green streams and checkpoints; it never acknowledges
    assert _confirmed_text(db, green_slot) == held_at, "the fenced green moved its slot"
    assert blue_bg.store.get_job(blue.job_id).status == "RUNNING", "blue still serving"
    final = blue_bg.request(blue.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert final.status == "SUCCEEDED", final.error
    assert blue_bg.result().status == "STOPPED"
    cancel = green_bg.request(green.job_id, "CANCEL", {})
    assert cancel.status == "SUCCEEDED", cancel.error
    assert green_bg.result().status == "CANCELED"
    live_bg = Background(cdc_pipeline(root, db, name="cdc-green", out=out),
                         restore=final.result["location"])
    live = live_bg.wait_running(timeout=90)
    for p in procs + writers(db, 4, [13]):  # and writers while green serves
        p.join()
    time.sleep(3)
    stop = live_bg.request(live.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert stop.status == "SUCCEEDED", stop.error
    assert live_bg.result().status == "STOPPED"
    rows = committed_in_order(out)
    jobs = {m.group(1) for f in os.listdir(out)
            if (m := re.fullmatch(r"part-.*~(.+)~c\d+~s\d+\.jsonl", f))}
    assert green.job_id not in jobs, "the fenced green published"
    assert {blue.job_id, live.job_id} <= jobs, (blue.job_id, live.job_id, jobs)
    image = replay(rows)  # asserts: no +I of a present key, no retraction of an absent one
    assert image == source_table(db), "blue's then green's changelog differs from the source"


@pytest.mark.timeout(240)
def test_a_green_whose_slot_was_not_copied_before_the_handover_is_told_how(db, tmp_path):
    """Green restoring blue's savepoint without a slot of its own, after blue acknowledged
    past the savepoint: before, "replication slot 'ckpt_cdc_green_...' is gone (dropped?)";
    now the error says to copy green's slot before the hand-over (ckpt cdc copy-slots, the
    DAG's copy_cdc_slots task)."""
    from cdc_pipelines import stream_lsn

    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.pgoutput import parse_lsn

    root, out = str(tmp_path), str(tmp_path / "out")
    blue_bg = Background(cdc_pipeline(root, db, name="cdc-blue", out=out))
    blue = blue_bg.wait_running(timeout=90)
    # the writers move blue past its savepoint; stopped once green was refused (up to 6 s)
    stop_writers = os.path.join(root, "stop-writers")
    procs = writers(db, 6, [31], stop_writers)
    try:
        sp = blue_bg.request(blue.job_id, "SAVEPOINT", {})
        assert sp.status == "SUCCEEDED", sp.error
        at = stream_lsn(sp.result["location"])
        deadline = time.monotonic() + 60
        while parse_lsn(_confirmed_text(db, job_object_name("cdc-blue"))) <= at:
            assert time.monotonic() < deadline, "blue never acknowledged past its savepoint"
            time.sleep(0.5)
        with pytest.raises(Exception, match=r"job cdc-green has no replication slot .* ckpt cdc "
                                            r"copy-slots PIPELINE --from-job BLUE --to-job "
                                            r"cdc-green"):
            cdc_pipeline(root, db, name="cdc-green", out=out).run(
                restore=sp.result["location"], fence_sinks=True)
    finally:
        open(stop_writers, "w").close()
        for p in procs:
            p.join()
        blue_bg.request(blue.job_id, "CANCEL", {})
        blue_bg.result()
