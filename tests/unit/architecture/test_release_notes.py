"""CHANGES.md's newest section is this version and names the versions the code writes:
the metadata-DB revision, the wire protocol and the snapshot formats (a migration or a
protocol bump without a release note fails here)."""

from __future__ import annotations

import re

from repo_paths import REPO_ROOT

import airflow_checkpoint_provider
from airflow_checkpoint_provider.engine.catalog.db import SCHEMA_HEAD
from airflow_checkpoint_provider.engine.protocol.messages import PROTOCOL_VERSION
from airflow_checkpoint_provider.engine.snapshot.codec import VERSION as METADATA_FORMAT
from airflow_checkpoint_provider.engine.typed_codec import FORMAT_VERSION

ROOT = REPO_ROOT


def test_the_newest_release_notes_name_this_version_and_what_it_writes():
    text = (ROOT / "CHANGES.md").read_text()
    version, body = re.search(r"^## (\S+)\n\n(.*?)(?=^## |\Z)", text, re.M | re.S).groups()
    assert version == airflow_checkpoint_provider.__version__
    line = body.splitlines()[0]
    assert line == (f"Metadata DB revision {SCHEMA_HEAD} · wire protocol {PROTOCOL_VERSION} · "
                    f"`_metadata` format {METADATA_FORMAT} · state encoding {FORMAT_VERSION}")
    for section in ("### Breaking changes", "### Features", "### Bug fixes"):
        assert section in body


def test_pyproject_has_the_same_version():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{airflow_checkpoint_provider.__version__}"\n' in pyproject
