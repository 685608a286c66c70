"""No package of the product holds more than 15 modules directly inside it (issue 53): past
that a reader no longer sees what a folder is for, and it should be split by role (as
``engine/connectors`` was split into one package per connector family)."""

from __future__ import annotations

import pytest
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT / "airflow_checkpoint_provider"
LIMIT = 15


def _module_counts() -> dict[str, int]:
    counts = {}
    for folder in [ROOT, *(p for p in ROOT.rglob("*") if p.is_dir())]:
        if folder.name == "__pycache__" or not (folder / "__init__.py").exists():
            continue
        counts[folder.relative_to(ROOT).as_posix() or "."] = len(list(folder.glob("*.py")))
    return counts


def test_the_module_count_sees_the_packages_it_must():
    counts = _module_counts()
    assert counts["engine/connectors"] >= 2
    assert counts["engine"] >= 10  # the engine's own top level (split by role in issue 53)
    assert counts["engine/runtime/host"] >= 4


@pytest.mark.parametrize("package", sorted(_module_counts()))
def test_no_package_holds_more_than_15_modules(package):
    count = _module_counts()[package]
    assert count <= LIMIT, (
        f"airflow_checkpoint_provider/{package} holds {count} modules directly inside it "
        f"(at most {LIMIT}): split it into packages by role")
