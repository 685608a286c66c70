"""Airflow for the provider tests (tests/unit/provider and tests/integration/provider, whose
conftest.py import this module before any test imports Airflow): a private AIRFLOW_HOME, a SQLite Airflow DB migrated once
per session, the repository's ``dags/`` parsed and written to it, and per test a fresh
metadata DB of the engine behind the ``checkpoint_metadata_default`` connection.

Jobs started by a test (and by the DAGs it runs) are cancelled through the metadata DB when
the test ends, whatever its outcome.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from provider_helpers import cancel_active_jobs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/support/..
DAGS = os.path.join(REPO, "dags")
_HOME = tempfile.mkdtemp(prefix="airflow-home-")

# Before anything imports airflow: its configuration is read on import.
os.environ.update({
    "AIRFLOW_HOME": _HOME,
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    "SPARK_LOCAL_IP": "127.0.0.1",
})
# spark-submit (the connection's spark-binary is a name) and `airflow` from this venv
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)

#: a provider folder's conftest ignores its tests when Airflow is not installed (the package
#: installed without the ``airflow`` extra)
AIRFLOW_MISSING = importlib.util.find_spec("airflow") is None
#: the DagBag written to Airflow's DB: one per session although both provider folders'
#: conftest.py define the ``airflow_db`` fixture
_BAG: list = []

@pytest.fixture(scope="session")
def airflow_db():
    """Migrate Airflow's DB once and write the DAGs of ``dags/`` to it; return the DagBag."""
    if _BAG:
        return _BAG[0]
    # what `airflow db migrate` runs, in this process: the CLI process would import Airflow
    # again (~3.5 of its ~4.8 CPU-s)
    from airflow.utils.db import upgradedb

    upgradedb()
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=DAGS, bundle_path=Path(DAGS), bundle_name="dags-folder")
    assert not bag.import_errors, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)
    _BAG.append(bag)
    return bag


@pytest.fixture
def metadata_url(tmp_path, monkeypatch):
    """A fresh metadata DB (schema created) behind the default ``checkpoint_metadata``
    connection; every job
    still active in it at the end of the test is cancelled."""
    from airflow_checkpoint_provider.engine.catalog import upgrade_database

    url = f"sqlite:///{tmp_path}/metadata.db"
    upgrade_database(url)  # as `ckpt db upgrade` does in a deployment: the hook never creates it
    monkeypatch.setenv("AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT",
                       json.dumps({"conn_type": "checkpoint_metadata", "extra": {"url": url}}))
    monkeypatch.setenv("CKPT_EXAMPLE_DIR", str(tmp_path / "example"))
    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    yield url
    cancel_active_jobs(url)


@pytest.fixture
def store(metadata_url):
    """A MetadataStore on the test's metadata DB, closed after the test."""
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    s = MetadataStore(metadata_url)
    yield s
    s.close()
