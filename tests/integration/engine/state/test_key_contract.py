"""One key contract for the heap and RocksDB backends: the same input gives the same state
on both; ambiguous or unusable keys are refused naming the operator and the key's type."""

from __future__ import annotations

import math
import os

import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    JobFailedError,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
    Source,
    read_committed,
)
from airflow_checkpoint_provider.engine.errors import BadRecordError
from airflow_checkpoint_provider.engine.state.keygroups import key_group_for
from airflow_checkpoint_provider.engine.state.keys import KeyContract


def test_scalars_and_flat_tuples_pass_with_one_type_per_operator():
    c = KeyContract("sum")
    assert c.check(1) == 1 and c.check(2**63 - 1) == 2**63 - 1
    with pytest.raises(BadRecordError, match=r"operator 'sum': key True is of type bool, but "
                                             r"this operator's keys are int"):
        c.check(True)
    with pytest.raises(BadRecordError, match="of type float"):
        c.check(1.0)
    t = KeyContract("t")
    assert t.check(["a", 1]) == ("a", 1)
    with pytest.raises(BadRecordError, match=r"\('str', 'bool'\)"):
        t.check(("a", True))


@pytest.mark.parametrize("key, message", [
    (float("nan"), "NaN"), (2**64, "beyond 64 bits"), ({"a": 1}, "type dict"),
    ((1, (2, 3)), "type tuple"), (__import__("datetime").date(2026, 1, 1), "type date")])
def test_unusable_keys_are_refused_naming_the_operator_and_type(key, message):
    with pytest.raises(BadRecordError, match=f"operator 'sum'.*{message}"):
        KeyContract("sum").check(key)


def test_minus_zero_is_the_key_zero_everywhere():
    assert KeyContract("f").check(-0.0) == 0.0 and not math.copysign(1, KeyContract("f").check(-0.0)) < 0
    assert key_group_for(-0.0, 128) == key_group_for(0.0, 128)


class KeyedRecords(Source):
    """A fixed list of (key, value) records, one split."""

    def __init__(self, records):
        self.records = records

    def splits(self):
        return ["all"]

    def open_split(self, split_id, position, ctx):
        from airflow_checkpoint_provider.engine.connectors.base import SplitReader

        records, start = self.records, position or 0

        class Reader(SplitReader):
            def __init__(self):
                self.i = start

            def read_batch(self, max_records):
                if self.i >= len(records):
                    return None
                batch = [{"id": i, "key": k, "value": v}
                         for i, (k, v) in enumerate(records[self.i:self.i + max_records], self.i)]
                self.i += len(batch)
                return batch

            def position(self):
                return self.i

        return Reader()


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.value_state("n", 0)

    def process_element(self, record, ctx):
        self.n.update(self.n.value() + 1)
        return {"key": repr(ctx.current_key), "n": self.n.value()}


def _run(root, records, backend):
    p = Pipeline(f"keys-{backend}", state_backend=backend,
                 checkpoint=CheckpointConfig(interval_ms=None, directory=os.path.join(root, "ck")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                 metadata_url=f"sqlite:///{root}/meta.db")
    (p.source(KeyedRecords(records), uid="src").key_by("key")
      .process(Count(), uid="count", parallelism=2).sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


@pytest.mark.timeout(120)
@pytest.mark.parametrize("records", [
    [(k, 1) for k in (1, 2, 1, 3, 2, 1)],
    [(k, 1) for k in (0.0, -0.0, 1.5, 0.0)],
    [(k, 1) for k in (("a", 1), ("a", 2), ("a", 1))],
], ids=["ints", "floats", "tuples"])
def test_heap_and_rocksdb_give_the_same_counts(tmp_path, records):
    results = []
    for backend in ("heap", "rocksdb"):
        root = str(tmp_path / backend)
        assert _run(root, records, backend).run().status == "FINISHED"
        final = {}
        for r in read_committed(os.path.join(root, "out")):
            final[r["key"]] = max(final.get(r["key"], 0), r["n"])
        results.append(final)
    assert results[0] == results[1]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_mixed_key_types_fail_the_job_at_once_on_both_backends(tmp_path, backend):
    p = _run(str(tmp_path), [(1, 1), (True, 1), (1.0, 1)], backend)
    with pytest.raises(JobFailedError) as failed:
        p.run()
    result = failed.value.result
    assert result.restarts == 0 and "one key type per keyed operator" in result.failure_reason
