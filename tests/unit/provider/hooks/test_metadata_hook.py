"""The metadata hook never creates or migrates a DB: a wrong URL fails at once, naming it."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from sqlalchemy import create_engine, text

from airflow_checkpoint_provider.engine.catalog import MetadataSchemaError
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook


def _connect(monkeypatch, url: str, **extra) -> CheckpointMetadataHook:
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_TEST", json.dumps(
        {"conn_type": "checkpoint_metadata", "extra": {"url": url, **extra}}))
    return CheckpointMetadataHook(checkpoint_conn_id="ckpt_test")


def test_a_missing_sqlite_file_fails_at_once_and_is_not_created(tmp_path, monkeypatch):
    typo = tmp_path / "metdata.db"
    hook = _connect(monkeypatch, f"sqlite:///{typo}", migrate=True)  # old extra: ignored

    with pytest.raises(MetadataSchemaError, match=r"metdata\.db does not exist.*ckpt db upgrade --db"):
        hook.list_jobs()
    with pytest.raises(MetadataSchemaError, match="does not exist"):
        asyncio.run(CheckpointMetadataHook(checkpoint_conn_id="ckpt_test").aget_job("x"))
    assert not typo.exists() and not os.listdir(tmp_path)


def test_a_db_without_the_schema_or_at_an_older_revision_is_not_migrated(tmp_path, monkeypatch):
    from alembic import command

    from airflow_checkpoint_provider.engine.catalog import alembic_config

    empty = tmp_path / "empty.db"
    create_engine(f"sqlite:///{empty}").connect().close()  # an existing file, no tables
    with pytest.raises(MetadataSchemaError, match=r"revision none.*ckpt db upgrade --db"):
        _connect(monkeypatch, f"sqlite:///{empty}").list_jobs()

    old = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(old), "0001")
    with pytest.raises(MetadataSchemaError, match=r"revision '?0001'?.*ckpt db upgrade"):
        _connect(monkeypatch, old).list_jobs()
    engine = create_engine(old)
    with engine.connect() as conn:  # still at 0001: the hook ran no DDL
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0001"
    engine.dispose()
