"""Every Python and shell example of README.md and docs/**/*.md runs here, so none can rot
(the parsing and running: tests/support/docs_examples.py).

A fenced block is run according to its language:

* ``python``: written to a file and run with this interpreter in a fresh temporary
  directory (the working directory: relative paths of an example land there), with the
  worktree on ``PYTHONPATH``;
* ``bash`` / ``sh`` / ``shell``: run with ``bash -euo pipefail`` in a fresh temporary
  directory, with the venv's ``bin`` (``ckpt``, ``python``) first on ``PATH``;
* any other language (``text``, ``json``, ``yaml``, ``mermaid``, ``ini``, ``sql``) is not
  code to run; a fence without a language is refused (so a shell example cannot slip
  through unlabelled).

An HTML comment on the line before a block changes that (unknown words are refused):

* ``<!-- docs-test: skip REASON -->``: not run; the test is reported as skipped with the
  reason (the few examples that need a cluster, Docker or an Airflow deployment);
* ``<!-- docs-test: same-as PATH -->``: the block is a copy of the repository file PATH
  (where a snippet include cannot work, e.g. in README.md on GitHub); the test asserts it is
  the same text, and the file is tested where it lives (a DAG example: by the DagBag test);
* ``<!-- docs-test: continue -->``: the block continues the previous block of the same
  language in the file; the chain runs as one program (the earlier blocks are not run
  alone).

A block whose body is a snippet include (``--8<-- "path"``) runs the included file. DAG
files under docs/examples/dags/ are loaded by test_dag_examples.py (Airflow's DagBag) instead, and the pages of ``RUN_ELSEWHERE`` (tutorial 2, which needs a running
Airflow) by their own test. docs/changes/ holds drafts other branches write for the lead to fold into
the pages; a draft is collected once mkdocs.yml's nav names it (published).
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
