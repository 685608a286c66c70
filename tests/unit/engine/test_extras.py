"""Optional dependencies: a missing one is named with the extra that installs it."""

import sys

import pytest

from airflow_checkpoint_provider.engine import Pipeline
from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.extras import MissingExtraError, require


@pytest.mark.parametrize("extra, module", [("rocksdb", "rocksdict"), ("s3", "boto3"),
                                           ("report", "matplotlib")])
def test_a_missing_extra_names_the_pip_command(monkeypatch, extra, module):
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError
    with pytest.raises(MissingExtraError, match=rf"airflow-checkpoint-provider\[{extra}\]"):
        require(extra)


def test_an_installed_extra_is_imported():
    assert require("rocksdb").__name__ == "rocksdict"


def test_a_rocksdb_pipeline_without_rocksdict_fails_at_definition(monkeypatch):
    monkeypatch.setitem(sys.modules, "rocksdict", None)
    with pytest.raises(ConfigurationError, match=r"state_backend='rocksdb'.*\[rocksdb\]"):
        Pipeline("needs-rocks", state_backend="rocksdb")
    Pipeline("heap-is-fine")  # the default backend needs nothing optional
