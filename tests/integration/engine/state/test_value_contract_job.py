"""Issue 35, end to end: tuple map keys and tuple values survive a restore, and a tuple
record field crosses a process as a tuple. Before the typed encoding, the first restore
failed every attempt with ``TypeError: unhashable type: 'list'`` (heap) and RocksDB gave
back lists even without a restore. Each job runs a few seconds (local runner, 3 slots)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from state_contract_pipelines import tuple_seen_pipeline

from airflow_checkpoint_provider.engine import read_committed


def _output(root) -> tuple[Counter, dict]:
    """The records without their counts (a multiset), and the counts per key and user key:
    the source emits a key's records in an order that differs between runs (several
    splits), so which record got which count may differ, not the set of counts."""
    records, counts = Counter(), {}
    for r in read_committed(os.path.join(root, "out")):
        records[(r["id"], r["key"], r["pair"])] += 1
        counts.setdefault((r["key"], r["pair"].split(", ", 1)[1]), []).append(r["count"])
    return records, {k: sorted(v) for k, v in counts.items()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("backend", "check_records"), [("heap", False), ("rocksdb", True)])
def test_tuple_state_reproduction_finishes_exactly_once(tmp_path, monkeypatch, backend,
                                                        check_records):
    """heap: the issue's reproduction (before: every restart failed with ``unhashable type:
    'list'``); rocksdb: also the tuple record field checked behind a process boundary
    (before: it arrived as a list)."""
    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    reference, faulty = tmp_path / "reference", tmp_path / "faulty"
    reference.mkdir()
    faulty.mkdir()
    ok = tuple_seen_pipeline(str(reference), fail=False, backend=backend,
                             check_records=check_records).run()
    assert ok.status == "FINISHED"
    result = tuple_seen_pipeline(str(faulty), fail=True, backend=backend,
                                 check_records=check_records).run()
    assert result.status == "FINISHED", result.failure_reason
    assert os.path.exists(faulty / "failed"), "the injected failure did not fire"
    assert result.restarts >= 1
    (expected, expected_counts), (got, got_counts) = _output(reference), _output(faulty)
    assert sum(expected.values()) == 500 and set(expected.values()) == {1}
    assert got == expected  # every record exactly once
    # the state counted each (key, user key) exactly once per record, across the restore
    assert got_counts == expected_counts
    assert all(c == list(range(1, len(c) + 1)) for c in got_counts.values())
