"""Savepoint retention rules, each on a real SQLite metadata DB and real savepoint
directories (a verified ``_metadata`` and a state file): what is kept, what is disposed, and
the reason the report gives for each."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from click.testing import CliRunner
from savepoint_helpers import NOW, history, make_job, make_savepoint

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.lifecycle.savepoints import (
    DisposeRefused,
    active_pins,
    apply_savepoint_retention,
    dispose_savepoint,
    pin_savepoint,
    unpin_savepoint,
)


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path}/metadata.db"


@pytest.fixture
def store(db_url):
    with MetadataStore(db_url) as s:
        yield s


def decisions(report) -> list[tuple[str, str]]:
    return [(d.decision, d.rule) for d in report.decisions]


def status(store, job_id, checkpoint_id) -> str:
    return store.get_checkpoint(job_id, checkpoint_id).status


def test_max_count_keeps_the_newest_and_reports_every_decision(store, tmp_path):
    job = make_job(store)
    sps = history(store, tmp_path, job)

    report = apply_savepoint_retention(store, job_name="orders", max_count=2, now=NOW)

    assert decisions(report) == [("disposed", "disposed"), ("disposed", "disposed"),
                                 ("kept", "retained"), ("kept", "newest")]
    assert report.disposed == sps[:2] and report.kept == sps[2:]
    assert [os.path.exists(p) for p in sps] == [False, False, True, True]
    assert [status(store, job, i) for i in (1, 2, 3, 4)] == ["DISCARDED", "DISCARDED",
                                                              "COMPLETED", "COMPLETED"]
    reasons = [d.reason for d in report.decisions]
    assert reasons[0] == "beyond max_count 2 (newest 4)"
    assert reasons[2] == "within retention: newest 2 of max_count 2"
    assert reasons[3] == "the newest savepoint is always kept"
    doc = report.to_dict()
    assert json.loads(json.dumps(doc)) == doc  # XCom- and --json-safe
    assert doc["savepoints"][0]["checkpoint_id"] == 1 and doc["savepoints"][0]["job_id"] == job


def test_the_newest_is_kept_even_when_every_savepoint_is_too_old(store, tmp_path):
    job = make_job(store)
    sps = history(store, tmp_path, job)

    report = apply_savepoint_retention(store, job_name="orders", max_age_seconds=3600,
                                       max_count=1, now=NOW)

    assert report.kept == [sps[-1]] and report.disposed == sps[:-1]
    assert report.decisions[0].reason == ("beyond max_count 1 (newest 4); older than max_age "
                                          "(40.0 h > 1.0 h)")
    # and again: the one left is still the newest
    again = apply_savepoint_retention(store, job_name="orders", max_age_seconds=0, now=NOW)
    assert decisions(again) == [("kept", "newest")] and os.path.exists(sps[-1])


def test_max_age_keeps_the_younger_ones(store, tmp_path):
    job = make_job(store)
    sps = history(store, tmp_path, job)

    report = apply_savepoint_retention(store, job_name="orders", max_age_seconds=25 * 3600,
                                       now=NOW)

    assert report.disposed == sps[:2]
    assert report.decisions[2].reason == "within retention: 20.0 h old, max_age 25.0 h"


@pytest.mark.parametrize("restorer_status", ["CREATED", "RUNNING", "RESTARTING"])
def test_a_savepoint_a_live_job_was_restored_from_is_kept_until_that_job_ends(
        store, tmp_path, restorer_status):
    job = make_job(store)
    sps = history(store, tmp_path, job)
    # green (another name, NO_CLAIM: the default) restored from the oldest savepoint, its
    # location spelled as the _metadata file: compared in canonical form
    green = make_job(store, "orders-green", restorer_status,
                     restored_from=os.path.join(sps[0], "_metadata"))

    report = apply_savepoint_retention(store, job_name="orders", max_count=1, now=NOW)

    assert decisions(report) == [("kept", "restored"), ("disposed", "disposed"),
                                 ("disposed", "disposed"), ("kept", "newest")]
    assert report.decisions[0].reason == (f"restored by running job orders-green ({green}, "
                                          f"{restorer_status})")
    assert os.path.exists(sps[0])
    with pytest.raises(DisposeRefused, match="still used by running job orders-green"):
        dispose_savepoint(sps[0], store)

    store.set_job_status(green, "CANCELED")
    report = apply_savepoint_retention(store, job_name="orders", max_count=1, now=NOW)
    assert decisions(report) == [("disposed", "disposed"), ("kept", "newest")]
    assert not os.path.exists(sps[0])


def test_a_pinned_savepoint_is_kept_until_its_pin_expires_or_is_released(store, tmp_path):
    job = make_job(store)
    sps = history(store, tmp_path, job)
    pin_savepoint(store, sps[0], holder="airflow:upgrade/run-1", ttl_seconds=3600,
                  reason="upgrade to v2", now=NOW)
    pin_savepoint(store, sps[1] + "/", holder="alice")  # no expiry; any spelling

    report = apply_savepoint_retention(store, job_name="orders", max_count=1, now=NOW)

    assert decisions(report)[:2] == [("kept", "pinned"), ("kept", "pinned")]
    assert report.decisions[0].reason == ("pinned by airflow:upgrade/run-1 until 2026-11-23 "
                                          "13:00:00 UTC (upgrade to v2)")
    assert report.decisions[1].reason == "pinned by alice until unpinned"
    assert report.disposed == [sps[2]]
    with pytest.raises(DisposeRefused, match="pinned by alice.*ckpt unpin"):
        dispose_savepoint(sps[1], store)

    # the first pin expired two hours later; alice releases hers
    later = NOW + timedelta(hours=2)
    assert [p.holder for p in active_pins(store, now=later)] == ["alice"]
    assert unpin_savepoint(store, holder="alice", path=sps[1]) == 1
    report = apply_savepoint_retention(store, job_name="orders", max_count=1, now=later)
    assert report.disposed == sps[:2]
    assert report.kept == [sps[3]]


def test_pinning_again_renews_and_only_savepoints_can_be_pinned(store, tmp_path):
    job = make_job(store)
    [sp] = history(store, tmp_path, job, ages=(1,))
    first = pin_savepoint(store, sp, holder="h", ttl_seconds=60, now=NOW)
    renewed = pin_savepoint(store, sp, holder="h", ttl_seconds=7200, now=NOW)
    assert renewed.expires_at - first.expires_at == timedelta(seconds=7140)
    assert len(store.list_savepoint_pins()) == 1
    chk = make_savepoint(store, tmp_path / "chk", job, 9, hours_old=0, kind="CHECKPOINT")
    with pytest.raises(DisposeRefused, match="not a savepoint"):
        pin_savepoint(store, chk, holder="h")
    with pytest.raises(ValueError, match="ttl must be positive"):
        pin_savepoint(store, sp, holder="h", ttl_seconds=0)


def test_savepoints_whose_files_are_gone_are_reported_missing_and_discarded(store, tmp_path):
    import shutil

    job = make_job(store)
    sps = history(store, tmp_path, job, ages=(3, 2, 1))
    shutil.rmtree(sps[0])

    report = apply_savepoint_retention(store, job_name="orders", max_count=1, now=NOW)

    assert decisions(report) == [("disposed", "missing"), ("disposed", "disposed"),
                                 ("kept", "newest")]
    assert "row marked DISCARDED" in report.decisions[0].reason
    assert status(store, job, 1) == "DISCARDED"


def test_retention_spans_every_job_of_the_name(store, tmp_path):
    v1 = make_job(store)
    v2 = make_job(store, status="RUNNING")
    old = make_savepoint(store, tmp_path, v1, 1, hours_old=5)
    new = make_savepoint(store, tmp_path, v2, 1, hours_old=1)

    report = apply_savepoint_retention(store, job_name="orders", max_count=1, now=NOW)

    assert report.disposed == [old] and report.kept == [new]
    assert [d.job_id for d in report.decisions] == [v1, v2]


def test_cli_prints_the_report_and_pins(db_url, store, tmp_path):
    job = make_job(store)
    sps = history(store, tmp_path, job, ages=(3, 2, 1))
    runner = CliRunner()

    res = runner.invoke(ckpt, ["pin", sps[0], "--holder", "bob", "--ttl", "600", "--db", db_url])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"pinned {sps[0]} for bob until ")

    res = runner.invoke(ckpt, ["savepoints", "orders", "--max-count", "1", "--db", db_url])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith(f"kept (pinned) savepoint 1 of {job[:8]}: {sps[0]} -- pinned by bob")
    assert lines[1] == (f"disposed (disposed) savepoint 2 of {job[:8]}: {sps[1]} -- beyond "
                        f"max_count 1 (newest 2)")
    assert lines[2].startswith(f"kept (newest) savepoint 3 of {job[:8]}: {sps[2]}")

    res = runner.invoke(ckpt, ["unpin", "--holder", "bob", "--db", db_url])
    assert res.exit_code == 0 and "released 1 pin(s) of bob" in res.output
    res = runner.invoke(ckpt, ["savepoints", "orders", "--max-count", "1", "--json",
                               "--db", db_url])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["retention"]["disposed"] == [sps[0]]
    assert [(s["rule"], s["location"]) for s in out["retention"]["savepoints"]] == [
        ("disposed", sps[0]), ("newest", sps[2])]
    assert [s["location"] for s in out["savepoints"]] == [sps[2]]
