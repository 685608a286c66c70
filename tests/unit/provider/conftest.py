"""The provider tests' Airflow (a private AIRFLOW_HOME set before anything imports Airflow)
and fixtures: tests/support/provider_airflow.py, shared with tests/integration/provider."""

from provider_airflow import AIRFLOW_MISSING, airflow_db, metadata_url, store  # noqa: F401

if AIRFLOW_MISSING:  # installed without the `airflow` extra
    collect_ignore_glob = ["test_*.py", "*/test_*.py"]
