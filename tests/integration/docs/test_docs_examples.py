"""Every Python and shell example of README.md and docs/**/*.md runs here, so none can rot.
How a block is parsed and run (languages, the ``docs-test`` comments, snippet includes, what
runs elsewhere): tests/support/docs_examples.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_examples import (
    BLOCKS,
    PROBLEMS,
    README_MAX_LINES,
    ROOT,
    Block,
    _is_dag_example,
    cancel_leftover_jobs,
    check_syntax,
    run_block,
)


def test_docs_examples_are_well_formed():
    """Fences have a language, annotations are known and skips say why; a skip is rare."""
    assert not PROBLEMS, "\n".join(PROBLEMS)
    skipped = [b for b in BLOCKS if b.annotation and b.annotation[0] == "skip"]
    assert len(BLOCKS) >= 20 and len(skipped) * 3 < len(BLOCKS), (len(BLOCKS), len(skipped))


def test_readme_is_short_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES, len(readme.splitlines())
    targets = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert targets, "the README links into docs/"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing
    # the DAG example comes before the engine example (the DAG author is the main reader)
    dag = readme.index("from airflow.sdk import")
    engine = readme.index("from airflow_checkpoint_provider.engine import")
    assert dag < engine


@pytest.mark.timeout(540)
@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if not _is_dag_example(b)], ids=lambda b: b.where
)
def test_docs_example_runs(block: Block, tmp_path: Path):
    if block.annotation and block.annotation[0] == "skip":
        check_syntax(block, tmp_path)  # a skipped example still parses
        pytest.skip(f"docs-test: skip {block.annotation[1]}")
    try:
        proc = run_block(block, tmp_path)
    finally:
        cancel_leftover_jobs(tmp_path)
    assert proc.returncode == 0, (
        f"{block.where} ({block.kind}) exited {proc.returncode}\n--- stdout\n"
        f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-5000:]}"
    )
