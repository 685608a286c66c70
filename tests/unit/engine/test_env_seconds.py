"""Seconds read from ``CKPT_*`` variables (engine.config.env_seconds): a value that is not
a number of seconds fails naming the variable, instead of a bare ``ValueError``."""

from __future__ import annotations

import pytest

from airflow_checkpoint_provider.engine.catalog.jobs import heartbeat_timeout
from airflow_checkpoint_provider.engine.config import env_seconds
from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.runners.spark import SLOT_WAIT_ENV, SparkRunner

pytestmark = pytest.mark.filterwarnings("ignore:env_seconds:DeprecationWarning")


def test_an_undeclared_variable_is_read_with_a_deprecation_warning(monkeypatch):
    monkeypatch.setenv("CKPT_TEST_WAIT_S", "2.5")
    with pytest.warns(DeprecationWarning, match=r"'CKPT_TEST_WAIT_S'\) reads a variable that "
                                                "is not declared"):
        assert env_seconds("CKPT_TEST_WAIT_S", 60.0) == 2.5
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "7")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # a declared one: no warning
        assert env_seconds("CKPT_HEARTBEAT_TIMEOUT_S", 60.0) == 7.0


def test_unset_or_empty_is_the_default_and_a_number_is_read(monkeypatch):
    monkeypatch.delenv("CKPT_TEST_WAIT_S", raising=False)
    assert env_seconds("CKPT_TEST_WAIT_S", 60.0) == 60.0
    monkeypatch.setenv("CKPT_TEST_WAIT_S", " ")
    assert env_seconds("CKPT_TEST_WAIT_S", 60.0) == 60.0
    monkeypatch.setenv("CKPT_TEST_WAIT_S", "2.5")
    assert env_seconds("CKPT_TEST_WAIT_S", 60.0) == 2.5


@pytest.mark.parametrize("raw", ["abc", "-1", "inf", "nan"])
def test_a_value_that_is_not_seconds_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("CKPT_TEST_WAIT_S", raw)
    with pytest.raises(ConfigurationError, match=r"CKPT_TEST_WAIT_S=.* must be a number of seconds"):
        env_seconds("CKPT_TEST_WAIT_S", 60.0)


def test_the_spark_slot_wait_and_the_heartbeat_timeout_use_it(monkeypatch):
    monkeypatch.setenv(SLOT_WAIT_ENV, "300")
    assert SparkRunner().slot_wait_seconds == 300.0
    monkeypatch.setenv(SLOT_WAIT_ENV, "5 min")
    with pytest.raises(ConfigurationError, match=SLOT_WAIT_ENV):
        SparkRunner()
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "soon")
    with pytest.raises(ConfigurationError, match="CKPT_HEARTBEAT_TIMEOUT_S"):
        heartbeat_timeout()
