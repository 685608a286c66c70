"""Issue 54, item 1: a team's own pipeline through the workflows, without copying a DAG file.

A DAG folder in a temporary directory holds the team's own pipeline module (``team_jobs``:
a keyed tally, not one of the bundled examples, as the ``jobs.orders`` module the docs name)
and the docs' example DAG file of a team's own workflows, copied verbatim
(``docs/examples/dags/my_blue_green.py``: a few lines per workflow). Its ``orders_blue_green``
(:func:`~airflow_checkpoint_provider.workflows.blue_green_upgrade`) and ``orders_upgrade``
(:func:`~airflow_checkpoint_provider.workflows.savepoint_upgrade`) run end to end through
``dag.test()`` (local runner, real SQLite metadata DB), and the committed output is checked
against its reference: per key the tallies 1..n, each exactly once.
"""

from __future__ import annotations

import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from provider_helpers import completed_checkpoints, run_dag, start_job, wait_for, xcom
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.usefixtures("airflow_db")

TEAM_JOBS = '''
"""The team's own pipeline: a keyed tally of clicks (v2 adds the mean)."""
import os

from airflow_checkpoint_provider.engine import (
    CheckpointConfig, FileSink, GeneratorSource, KeyedProcessFunction, Pipeline,
    RestartStrategy)


class Tally(KeyedProcessFunction):
    label = "v1"

    def open(self, ctx):
        self.n = ctx.value_state("n", 0)
        self.total = ctx.value_state("total", 0)

    def process_element(self, record, ctx):
        n, total = self.n.value() + 1, self.total.value() + record["value"]
        self.n.update(n)
        self.total.update(total)
        return {"key": ctx.current_key, "n": n, "total": total, "label": self.label}


class TallyWithMean(Tally):
    label = "v2"

    def process_element(self, record, ctx):
        out = super().process_element(record, ctx)
        return {**out, "mean": out["total"] / out["n"]}


def _build(version, function):
    root = os.environ["TEAM_JOBS_DIR"]  # the worker's, as a deployment sets it
    p = Pipeline("team-tally", version=version,
                 checkpoint=CheckpointConfig(interval_ms=500,
                                             directory=os.path.join(root, "checkpoints"),
                                             savepoint_directory=os.path.join(root, "savepoints")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=500))
    (p.source(GeneratorSource(None, num_keys=6, seed=11, splits=1, records_per_second=100),
              uid="clicks", parallelism=1)
     .key_by("key")
     .process(function, uid="tally")
     .sink(FileSink(os.path.join(root, "output")), uid="tallies"))
    return p


def build_v1():
    return _build("v1", Tally())


def build_v2():
    return _build("v2", TallyWithMean())
'''

#: the docs' example of a team's own workflows, run as written (its pipelines are
#: ``jobs.orders:build_v1``/``build_v2``: a module of the team's, here the tally)
DOCS_DAG = REPO_ROOT / "docs" / "examples" / "dags" / "my_blue_green.py"
JOBS_ORDERS = "from team_jobs import build_v1, build_v2  # noqa: F401 - the team's pipeline\n"


@pytest.fixture
def team_dags(airflow_db, tmp_path, monkeypatch):
    """The team's DAG folder (its pipeline module and two DAG files), parsed and written to
    Airflow's DB under a bundle of its own; the pipeline importable by the worker and the
    jobs (``sys.path``, as Airflow puts the DAG folder there)."""
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    folder = tmp_path / "team-dags"
    folder.mkdir()
    root = tmp_path / "team"
    (folder / "team_jobs.py").write_text(textwrap.dedent(TEAM_JOBS))
    (folder / "my_blue_green.py").write_text(DOCS_DAG.read_text())  # verbatim
    (folder / "jobs").mkdir()
    (folder / "jobs" / "__init__.py").write_text("")
    (folder / "jobs" / "orders.py").write_text(JOBS_ORDERS)
    # the docs' DAGs hand the sinks' database to the jobs from the connection orders_db
    monkeypatch.setenv("AIRFLOW_CONN_ORDERS_DB", "postgresql://orders:secret@127.0.0.1/orders")
    monkeypatch.setenv("TEAM_JOBS_DIR", str(root))
    monkeypatch.syspath_prepend(str(folder))
    with create_session() as session:
        session.merge(DagBundleModel(name="team-dags"))
    bag = DagBag(dag_folder=str(folder), bundle_path=folder, bundle_name="team-dags")
    assert not bag.import_errors, bag.import_errors
    assert set(bag.dag_ids) == {"orders_blue_green", "orders_upgrade", "orders_savepoints"}
    sync_bag_to_db(bag, "team-dags", None)
    yield bag, root
    for module in ("team_jobs", "jobs", "jobs.orders"):
        sys.modules.pop(module, None)


def tallies(root: Path) -> dict[str, list[int]]:
    from airflow_checkpoint_provider.engine import read_committed

    out: dict[str, list[int]] = defaultdict(list)
    for row in read_committed(str(root / "output")):
        out[row["key"]].append(row["n"])
    return out


def duplicates_and_missing(counts: dict[str, list[int]]) -> tuple[int, int]:
    """Against the reference (per key the tallies 1..n, each once)."""
    duplicates = sum(len(c) - len(set(c)) for c in counts.values())
    missing = sum(max(c) - len(set(c)) for c in counts.values())
    return duplicates, missing


@pytest.mark.timeout(300)
def test_the_docs_blue_green_example_runs_a_teams_own_pipeline_exactly_once(
        team_dags, metadata_url, store, tmp_path):
    bag, root = team_dags
    blue = start_job(metadata_url, tmp_path, pipeline="jobs.orders:build_v1",
                     job_name="orders-blue")
    wait_for(lambda: completed_checkpoints(store, blue), 60, "a checkpoint of blue")
    # the example's gate watches green 120 s: a run's conf may shorten it within its bounds
    conf = {"green_pipeline": "v2", "runner": "local", "gate_window_s": 6,
            "min_checkpoints": 2, "max_checkpoint_duration_ms": 30000}

    state, tis, dr = run_dag(bag, "orders_blue_green", conf)

    assert state == "success", tis
    assert tis["promote_green"] == "success" and tis["cancel_green"] == "skipped"
    # promoted in place: the fenced green serves; refused (e.g. it restarted meanwhile):
    # go_live's resubmitted green does
    promoted = xcom(dr, "promote_green", key="promoted")
    live = store.get_job(xcom(dr, "start_green" if promoted else "go_live", key="job_id"))
    assert live.job_name == "orders-green" and live.version == "v2"
    assert live.status == "RUNNING" and live.restored_from == xcom(dr, "stop_blue")
    assert xcom(dr, "stop_blue").startswith(str(root / "savepoints"))  # the job's own
    assert store.get_job(blue).status == "STOPPED"
    wait_for(lambda: len(completed_checkpoints(store, live.job_id)) >= 2, 60,
             "two checkpoints of green live")
    counts = tallies(root)
    rows = sum(len(c) for c in counts.values())
    print("team blue-green (duplicates, missing):", duplicates_and_missing(counts), "rows", rows)
    assert duplicates_and_missing(counts) == (0, 0), counts
    labels = {r["label"] for r in _rows(root)}
    assert labels == {"v1", "v2"}, "blue's and green's output, published one after the other"


@pytest.mark.timeout(240)
def test_the_docs_upgrade_example_runs_a_teams_own_pipeline_exactly_once(
        team_dags, metadata_url, store, tmp_path):
    bag, root = team_dags
    v1 = start_job(metadata_url, tmp_path, pipeline="jobs.orders:build_v1", job_name="orders")
    wait_for(lambda: completed_checkpoints(store, v1), 60, "a checkpoint of v1")

    state, tis, dr = run_dag(bag, "orders_upgrade", {"runner": "local"})

    assert state == "success", tis
    assert tis["upgraded"] == "success" and tis["restart_v1"] == "skipped"
    v2 = store.get_job(xcom(dr, "start_v2"))
    assert v2.version == "v2" and v2.status == "RUNNING"
    assert v2.restored_from == xcom(dr, "stop_v1")
    assert store.get_job(v1).status == "STOPPED"
    wait_for(lambda: len(completed_checkpoints(store, v2.job_id)) >= 2, 60,
             "two checkpoints of v2")
    counts = tallies(root)
    print("team upgrade (duplicates, missing):", duplicates_and_missing(counts))
    assert duplicates_and_missing(counts) == (0, 0), counts
    assert {r["label"] for r in _rows(root)} == {"v1", "v2"}


def _rows(root: Path) -> list[dict]:
    from airflow_checkpoint_provider.engine import read_committed

    return list(read_committed(str(root / "output")))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("param", "value"), [
    ("green_pipeline", "jobs.orders:build_v2"),  # code, not one of the author's keys
    ("green_pipeline", "os:system"),
    ("blue_job", "payments-blue"),  # a job the author did not name
    ("savepoint_dir", "/etc/cron.d"),  # a path outside the author's roots
])
def test_a_conf_outside_the_authors_choices_is_refused_before_the_run_starts(
        team_dags, metadata_url, param, value):
    from airflow.sdk.exceptions import ParamValidationError

    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    bag, _ = team_dags
    with pytest.raises(ParamValidationError, match=param):
        bag.get_dag("orders_blue_green").test(run_conf={param: value})
    with MetadataStore(metadata_url) as store:
        assert store.list_jobs() == []
