"""Every public operator, sensor and trigger class of the provider is documented in the DAG
author's guide (the pages of docs/airflow/, the "Airflow provider" section) by its own
mkdocstrings block
(``::: airflow_checkpoint_provider.operators.submit.SubmitCheckpointedJobOperator``), and
every such block names a class that exists (issue 56: three operators appeared only in
change notes). Their registration in ``get_provider_info()`` is checked by
tests/unit/provider/test_provider_registration.py."""

from __future__ import annotations

import re
import textwrap

from provider_classes import ROLES, ProviderClass, public_classes
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
GUIDE = ROOT / "docs" / "airflow"
ROLE = "|".join(ROLES)
BLOCK = re.compile(rf"^::: (airflow_checkpoint_provider\.(?:{ROLE})\.[\w.]+)\s*$", re.M)


def undocumented(classes: list[ProviderClass], guide: str) -> list[str]:
    shown = set(BLOCK.findall(guide))
    return [c.path for c in classes if c.path not in shown]


def unknown_blocks(classes: list[ProviderClass], guide: str) -> list[str]:
    paths = {c.path for c in classes}
    return [p for p in BLOCK.findall(guide) if p not in paths]


def test_a_class_added_without_docs_is_found(tmp_path):
    for role in ROLES:
        (tmp_path / role).mkdir()
    (tmp_path / "operators" / "base.py").write_text(
        "class CheckpointBaseOperator(BaseOperator): pass\n"
    )
    (tmp_path / "operators" / "jobs.py").write_text(textwrap.dedent("""
        class _Hidden(CheckpointBaseOperator): pass
        class RescaleJobOperator(_Hidden): pass
        class Helper: pass
    """))
    (tmp_path / "triggers" / "poll.py").write_text("class JobTrigger(BaseTrigger): pass\n")
    classes = public_classes(tmp_path)
    assert [c.path for c in classes] == [
        "airflow_checkpoint_provider.operators.jobs.RescaleJobOperator",
        "airflow_checkpoint_provider.triggers.poll.JobTrigger",
    ]
    guide = "::: airflow_checkpoint_provider.triggers.poll.JobTrigger\n    options:\n"
    assert undocumented(classes, guide) == [
        "airflow_checkpoint_provider.operators.jobs.RescaleJobOperator"
    ]
    stale = guide + "::: airflow_checkpoint_provider.operators.jobs.ScaleOperator\n"
    assert unknown_blocks(classes, stale) == [
        "airflow_checkpoint_provider.operators.jobs.ScaleOperator"
    ]


def guide_text() -> str:
    """Every page of the provider section, one after the other."""
    pages = sorted(GUIDE.glob("*.md"))
    assert pages, f"no pages in {GUIDE}"
    return "\n".join(p.read_text() for p in pages)


def test_every_public_operator_sensor_and_trigger_is_in_the_guide():
    classes = public_classes()
    assert len(classes) >= 20, [c.path for c in classes]
    missing = undocumented(classes, guide_text())
    assert not missing, f"not documented in docs/airflow/: {missing}"


def test_the_guide_documents_no_class_that_does_not_exist():
    unknown = unknown_blocks(public_classes(), guide_text())
    assert not unknown, unknown
