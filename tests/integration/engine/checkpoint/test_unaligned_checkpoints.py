"""Unaligned checkpoints: exactly-once with in-flight records as channel state, under
backpressure from a deliberately slow sink behind a keyed exchange."""

import pytest
from click.testing import CliRunner
from pipelines import (
    Background,
    FaultPlan,
    RunningSum,
    SlowFileSink,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    ConfigurationError,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    RestoreError,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

N = 6000
pytestmark = pytest.mark.slow


def _unaligned_stats(root) -> list[dict]:
    store = MetadataStore("sqlite:///" + str(root / "meta.db"))
    try:
        rows = [c for j in store.list_jobs() for c in store.list_checkpoints(j.job_id)
                if c.status in ("COMPLETED", "SUBSUMED")]
        return [t for c in rows for t in (c.task_stats or []) if t.get("unaligned")]
    finally:
        store.close()


@pytest.mark.timeout(300)
def test_unaligned_checkpoints_are_exactly_once_under_failures_and_backpressure(tmp_path):
    # the sink takes 0.3 ms a record, the sources offer more: the keyed inputs are full
    faults = FaultPlan(str(tmp_path / "faults"), [("record", 1500), ("kill", 3300),
                                                  ("record", 4700)])
    p = running_sum_pipeline(str(tmp_path), num_records=N, faults=faults,
                             sink=SlowFileSink(str(tmp_path / "out"), 0.0003),
                             interval_ms=150, unaligned=True, keyed_parallelism=2)
    result = p.run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 3 and result.restarts == len(faults.attempts_hit())
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))
    stats = _unaligned_stats(tmp_path)
    assert stats, "checkpoints were unaligned"
    assert sum(t["inflight_records"] for t in stats) > 0, "in-flight records were persisted"


@pytest.mark.timeout(300)
def test_aligned_timeout_turns_a_slow_checkpoint_unaligned(tmp_path):
    p = running_sum_pipeline(str(tmp_path), num_records=N, delay_s=0.0003, interval_ms=150,
                             unaligned=True, aligned_timeout_ms=20, keyed_parallelism=2)
    assert p.run().status == "FINISHED"
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))
    assert _unaligned_stats(tmp_path), "an aligned checkpoint turned unaligned"
    out = CliRunner().invoke(ckpt, ["checkpoints", "running-sum", "--tasks",
                                    "--db", "sqlite:///" + str(tmp_path / "meta.db")])
    assert out.exit_code == 0, out.output
    assert "unaligned" in out.output and "in flight" in out.output and "alignment" in out.output


@pytest.mark.timeout(300)
def test_savepoints_stay_aligned_and_unaligned_state_restores_only_at_its_parallelism(tmp_path):
    # retained=100: the requested checkpoint must outlive the periodic ones (every 100 ms)
    # that complete before the cancel lands (on a loaded machine it was subsumed and deleted)
    p = running_sum_pipeline(str(tmp_path / "a"), num_records=10**9, rate=20_000,
                             delay_s=0.0003, interval_ms=100, unaligned=True,
                             keyed_parallelism=2, retained=100)
    bg = Background(p)
    job = bg.wait_running(min_checkpoints=3)
    refused = bg.request(job.job_id, "SAVEPOINT", {"unaligned": True})
    assert refused.status == "FAILED" and "savepoints are always aligned" in refused.error
    sp = bg.request(job.job_id, "SAVEPOINT", {})
    assert sp.status == "SUCCEEDED", sp.error
    chk = bg.request(job.job_id, "CHECKPOINT")
    assert chk.status == "SUCCEEDED", chk.error
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"
    savepoint = load_snapshot(sp.result["location"])
    assert all(s.channel_state is None for op in savepoint.metadata.operators.values()
               for s in op.subtasks), "a savepoint is aligned: no in-flight records"
    checkpoint = load_snapshot(chk.result["location"])
    held = [s for s in checkpoint.metadata.operators["sum"].subtasks if s.channel_state]
    assert held, "the checkpoint under backpressure holds in-flight records"
    rescaled = running_sum_pipeline(str(tmp_path / "b"), keyed_parallelism=3)
    with pytest.raises(RestoreError, match="'sum'.*unaligned checkpoint.*take a savepoint"):
        rescaled.run(restore=chk.result["location"], trust_snapshot=True)  # another DB


@pytest.mark.parametrize("options, message", [
    ({"unaligned": True, "mode": "at_least_once"}, "unaligned=True needs mode exactly_once"),
    ({"aligned_timeout_ms": 100}, "aligned_timeout_ms needs unaligned=True"),
    ({"unaligned": True, "aligned_timeout_ms": -1}, "aligned_timeout_ms must be >= 0"),
])
def test_invalid_unaligned_options_are_refused(options, message):
    with pytest.raises(ConfigurationError, match=message):
        CheckpointConfig(**options)


# -- a chain without any uid (a stateless map between two exchanges) -------------------------

def _identity(record):
    return record


def _hop_pipeline(root, *, faults=None, hop_name="stateless hop", num_records=N):
    """gen (2) -rebalance-> map without a uid (3) -hash-> sum (2) -> slow sink: the map's
    chain has input channels, and under backpressure in-flight records, but no uid."""
    p = Pipeline("hop", max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=150, unaligned=True,
                                             directory=str(root / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=8, delay_ms=0),
                 metadata_url="sqlite:///" + str(root / "meta.db"))
    (p.source(GeneratorSource(num_records, num_keys=50, seed=7, splits=4), uid="gen",
              parallelism=2)
      .map(_identity, name=hop_name, parallelism=3)
      .key_by("key")
      .process(RunningSum(faults), uid="sum", parallelism=2)
      .sink(SlowFileSink(str(root / "out"), 0.0003) if faults is not None
            else FileSink(str(root / "out")), uid="out"))
    return p


@pytest.mark.timeout(300)
def test_a_chain_without_uid_keeps_its_in_flight_records_under_its_derived_id(tmp_path):
    """Before: every unaligned checkpoint was declined at the map's chain ("an unaligned
    checkpoint needs a uid on one operator of the chain"), so none completed and each kill
    restarted the job from nothing (the Nexmark join queries never finished)."""
    faults = FaultPlan(str(tmp_path / "faults"), [("kill", 2500), ("record", 4200)])
    p = _hop_pipeline(tmp_path, faults=faults)
    hop = next(v for v in p.execution_graph().vertices if v.name == "stateless hop")
    result = p.run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 2
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))
    stats = _unaligned_stats(tmp_path)
    assert any(t["vertex"] == hop.id for t in stats), "the map's chain acked unaligned"
    assert sum(t["inflight_records"] for t in stats if t["vertex"] == hop.id) > 0


def test_derived_chain_ids_are_stable_distinct_and_follow_the_topology(tmp_path):
    ids = [v.auto_uid for v in _hop_pipeline(tmp_path).execution_graph().vertices]
    assert ids == [v.auto_uid for v in _hop_pipeline(tmp_path).execution_graph().vertices]
    assert len(set(ids)) == len(ids) and all(i.startswith("~chain-") for i in ids)
    renamed = [v.auto_uid for v in _hop_pipeline(tmp_path, hop_name="other").execution_graph()
               .vertices]
    assert renamed[0] == ids[0] and renamed[1] != ids[1]  # the source's chain is unchanged


def test_in_flight_records_of_a_chain_that_is_gone_are_refused_naming_it(tmp_path):
    from airflow_checkpoint_provider.engine.checkpoint.restore import assign_restore
    from airflow_checkpoint_provider.engine.snapshot.codec import LoadedSnapshot

    graph = _hop_pipeline(tmp_path).execution_graph()
    hop = graph.vertices[1]
    channel = {"path": "channel-1-0", "size": 3, "sha256": "0" * 64, "records": 1}

    def snapshot(auto_uid):
        doc = {"job_id": "j", "job_name": "hop", "checkpoint_id": 3, "kind": "CHECKPOINT",
               "timestamp_ms": 1, "operators": {auto_uid: {
                   "kind": "operator", "parallelism": 3, "max_parallelism": 128, "states": {},
                   "subtasks": [{"index": 0, "operator_state": [], "keyed": None,
                                 "channel_state": channel}]}}}
        return LoadedSnapshot(str(tmp_path / "chk-3"), doc)

    specs = assign_restore(snapshot(hop.auto_uid), graph)
    assert specs[(hop.id, 0)][hop.auto_uid]["channel_state"].records == 1
    with pytest.raises(RestoreError, match=r"in-flight records of an operator chain without a "
                                           r"uid \(derived id '~chain-0000000000000000'\)"):
        assign_restore(snapshot("~chain-0000000000000000"), graph)
    assert assign_restore(snapshot("~chain-0000000000000000"), graph,
                          allow_non_restored_state=True) == {}
    rescaled = _hop_pipeline(tmp_path)
    rescaled._graph.nodes[1].parallelism = 4
    with pytest.raises(RestoreError, match="chain 'stateless hop'.*cannot be restored at "
                                           "parallelism 4"):
        assign_restore(snapshot(hop.auto_uid), rescaled.execution_graph())


def test_in_flight_records_go_to_a_stateful_uid_else_any_uid_else_the_derived_id(tmp_path):
    from types import SimpleNamespace

    from airflow_checkpoint_provider.engine.runtime.task.checkpointing import channel_holder

    vertex = _hop_pipeline(tmp_path).execution_graph().vertices[1]

    def op(uid):
        return SimpleNamespace(uid=uid)

    state = object()
    assert channel_holder(vertex, [(op(None), None), (op("m"), None), (op("s"), state)]) == "s"
    assert channel_holder(vertex, [(op(None), None), (op("m"), None)]) == "m"
    assert channel_holder(vertex, [(op(None), None)]) == vertex.auto_uid
