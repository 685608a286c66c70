"""airflow-checkpoint-provider: checkpointed PySpark pipelines and their Airflow provider.

The engine (:mod:`airflow_checkpoint_provider.engine`) never imports Airflow; the Airflow
side lives in ``hooks/``, ``operators/``, ``sensors/``, ``triggers/`` and ``links/`` and is
registered through :func:`get_provider_info` (entry point ``apache_airflow_provider``).
"""

from __future__ import annotations

__version__ = "0.2.0"

_PACKAGE = "airflow_checkpoint_provider"

# The metadata DB connection form (type ``checkpoint_metadata``; see hooks/metadata.py for
# how the hook reads a connection). Extra fields are stored unprefixed in the extra JSON.
CONNECTION_FIELDS: dict = {
    "url": {
        "label": "SQLAlchemy URL",
        "schema": {"type": ["string", "null"]},
        "description": "Full URL of the metadata DB, e.g. sqlite:////data/ckpt/metadata.db or "
                       "postgresql+psycopg://user:pw@db:5432/ckpt. Wins over host/port/schema.",
    },
    "driver": {
        "label": "SQLAlchemy driver",
        "schema": {"type": ["string", "null"]},
        "description": "Driver used with host/port/schema/login/password when no URL is given "
                       "(default postgresql+psycopg).",
    },
}
UI_FIELD_BEHAVIOUR: dict = {
    "hidden-fields": [],
    "relabeling": {"host": "Host, SQLAlchemy URL or SQLite path", "schema": "Database"},
    "placeholders": {
        "host": "db.example.com  |  /data/ckpt/metadata.db",
        "port": "5432",
        "schema": "ckpt",
        "url": "sqlite:////data/ckpt/metadata.db",
        "driver": "postgresql+psycopg",
    },
}


#: every module of ``operators/`` (a test checks the folder against it)
OPERATOR_MODULES = ("submit", "control", "savepoints", "verify", "cdc", "upgrade", "stability",
                    "rollback", "promote", "cutover")


def get_provider_info() -> dict:
    """Provider metadata read by Airflow's ProvidersManager (``airflow providers list``)."""
    return {
        "package-name": "airflow-checkpoint-provider",
        "name": "Checkpointed PySpark pipelines",
        "description": "Submit, savepoint, stop, upgrade and blue-green checkpointed PySpark "
                       "pipelines; sensors and deferrable triggers on their metadata DB.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Checkpointed Pipelines",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Checkpointed Pipelines",
                "python-modules": [f"{_PACKAGE}.hooks.metadata", f"{_PACKAGE}.hooks.submit"],
            }
        ],
        "operators": [
            {
                "integration-name": "Checkpointed Pipelines",
                "python-modules": [f"{_PACKAGE}.operators.{m}" for m in OPERATOR_MODULES],
            }
        ],
        "sensors": [
            {
                "integration-name": "Checkpointed Pipelines",
                "python-modules": [f"{_PACKAGE}.sensors.checkpoint", f"{_PACKAGE}.sensors.kafka"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Checkpointed Pipelines",
                "python-modules": [f"{_PACKAGE}.triggers.checkpoint", f"{_PACKAGE}.triggers.events",
                                   f"{_PACKAGE}.triggers.kafka", f"{_PACKAGE}.triggers.cutover",
                                   f"{_PACKAGE}.triggers.standby"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": f"{_PACKAGE}.hooks.metadata.CheckpointMetadataHook",
                "hook-name": "Checkpoint metadata DB",
                "connection-type": "checkpoint_metadata",
                "conn-fields": CONNECTION_FIELDS,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
        # Savepoint/checkpoint assets (see assets.py): checkpoint://<job_name>/savepoints
        "asset-uris": [
            {"schemes": ["checkpoint"], "handler": f"{_PACKAGE}.assets.sanitize_uri"},
        ],
        "extra-links": [f"{_PACKAGE}.links.checkpoint.CheckpointHistoryLink"],
    }
