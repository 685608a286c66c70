"""Fixtures of the documentation tests."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.fixture(scope="session")
def docs_build() -> list[str]:
    """``make docs``'s mkdocs command with its own arguments, as `make -n docs` prints it
    (its variable assignments left out), run by this Python: the tests build as the recipe
    does, with no copy of its flags."""
    out = subprocess.run(["make", "-s", "-n", "docs"], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    [line] = [ln for ln in out.splitlines() if "mkdocs build" in ln]
    _program, *args = [w for w in shlex.split(line) if not re.match(r"[A-Z0-9_]+=", w)]
    return [sys.executable, "-m", "mkdocs", *args]


@pytest.fixture(scope="session")
def built_site(tmp_path_factory, docs_build) -> Path:
    """The site as ``make docs`` builds it, into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [*docs_build, "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out
