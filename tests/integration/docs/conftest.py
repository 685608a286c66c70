"""Fixtures of the documentation tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The site as ``make docs`` builds it (strict; without ``--quiet``, which would hide
    the warnings strict fails on), into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out
