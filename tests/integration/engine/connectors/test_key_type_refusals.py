"""Issue 37, item 7: keys of types a job cannot keep are refused at once, naming the
operator or sink and the column, instead of a raw Arrow error and a restart loop.

* A Delta upsert sink whose records give the key column an int in some records and a str
  in others: before, a raw ``ArrowTypeError: Unable to merge: Field id has incompatible
  types`` at the barrier and a restart; now ``BadRecordError`` naming the column and both
  types, and the job fails without restarting (a bad record fails every attempt).
* ``regular_join`` on a Decimal key or an int beyond 64 bits is refused with
  ``BadRecordError`` naming the operator and the key (the key contract of issue 35); set
  values and ints beyond 64 bits as *values* are joined.

Local runner, a few seconds per test.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.errors import JobFailedError


def _pipeline(root) -> Pipeline:
    return Pipeline("keys", checkpoint=CheckpointConfig(interval_ms=200, directory=f"{root}/ck"),
                    restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0))


@pytest.mark.timeout(120)
def test_a_delta_upsert_key_of_mixed_types_fails_at_once_naming_the_column(tmp_path, caplog):
    pytest.importorskip("deltalake")
    from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink

    p = _pipeline(tmp_path)
    (p.source(GeneratorSource(20, num_keys=5, seed=1), uid="gen")
     .map(lambda r: {"_op": "+I", "id": r["id"] if r["id"] % 2 else str(r["id"]),
                     "v": r["id"]}, uid="mixed")
     .sink(DeltaSink(str(tmp_path / "t"), mode="upsert", key=["id"]), uid="out"))
    with pytest.raises(JobFailedError, match=r"Delta sink 'out': the records of one epoch give "
                                             r"a column values of different types \(column "
                                             r"'id' is int64 and string\)"):
        p.run()
    assert "will not restart (0 restarts" in caplog.text


def _join(tmp_path, key) -> Pipeline:
    p = _pipeline(tmp_path)

    def side(name):
        def f(r):
            return {"_op": "+I", f"{name}_id": r["id"], "k": key(r["id"] % 5),
                    f"{name}_tags": {r["id"], -r["id"]}, f"{name}_big": 2**70 + r["id"]}
        return (p.source(GeneratorSource(20, num_keys=5, seed=len(name)), uid=f"src-{name}")
                .map(f, uid=f"map-{name}").key_by("k"))

    (side("left").regular_join(side("right"), how="inner", uid="join",
                               left_primary_key="left_id", right_primary_key="right_id")
     .sink(FileSink(str(tmp_path / "out")), uid="out"))
    return p


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("key", "refusal"), [
    (lambda i: Decimal(i) / 10, "operator 'join': key Decimal('0') has a value of type Decimal"),
    (lambda i: 2**70 + i, "operator 'join': key 1180591620717411303424 is an int beyond 64 bits"),
])
def test_regular_join_refuses_keys_it_cannot_keep_naming_the_operator(tmp_path, key, refusal):
    with pytest.raises(JobFailedError, match=f"BadRecordError: {refusal}".replace("(", r"\(")
                       .replace(")", r"\)")):
        _join(tmp_path, key).run()


@pytest.mark.timeout(120)
def test_regular_join_keeps_set_and_big_int_values(tmp_path):
    assert _join(tmp_path, lambda i: i).run().status == "FINISHED"
    rows = list(read_committed(str(tmp_path / "out")))
    assert len(rows) == 80
    assert all(isinstance(r["left_tags"], list | set) and r["left_big"] >= 2**70 for r in rows)
