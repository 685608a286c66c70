"""The documentation examples as tests see them: every fenced block of README.md and
docs/**/*.md parsed (``BLOCKS``, with the ``PROBLEMS`` found), and the code that runs one:
tests/integration/docs/test_docs_examples.py runs each, so none can rot (the Airflow tutorial,
tests/deployment/tutorial/test_airflow_tutorial.py, runs its page as one program).

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
files under docs/examples/dags/ are loaded by tests/integration/docs/test_dag_examples.py (Airflow's
DagBag) instead, and the pages of ``RUN_ELSEWHERE`` (tutorial 2, which needs a running
Airflow) by their own test. docs/changes/ holds drafts other branches write for the lead to fold into
the pages; a draft is collected once mkdocs.yml's nav names it (published).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/support/..
DOCS = ROOT / "docs"
DRAFTS = DOCS / "changes"
VENV_BIN = Path(sys.executable).parent
README_MAX_LINES = 250
ACTIVE = ("CREATED", "RUNNING", "RESTARTING")

PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell"}
NOT_CODE = {"text", "json", "yaml", "mermaid", "ini", "sql", "console", "toml"}
ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<word>[\w-]+)\s*(?P<rest>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$')
DAG_EXAMPLES = DOCS / "examples" / "dags"
#: pages whose blocks run as one program elsewhere (they need a running Airflow)
RUN_ELSEWHERE = {
    DOCS / "get-started" / "airflow-tutorial.md": "tests/deployment/tutorial/test_airflow_tutorial.py"
}


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    annotation: tuple[str, str] | None = None
    chain: list[Block] = field(default_factory=list)  # earlier blocks it continues

    @property
    def kind(self) -> str:
        return "python" if self.lang in PYTHON else "shell" if self.lang in SHELL else "text"

    @property
    def where(self) -> str:
        lines = "+".join(str(b.line) for b in [*self.chain, self])
        return f"{self.path.relative_to(ROOT)}:{lines}"


def published_drafts() -> set[Path]:
    """The docs/changes/ pages the site's nav names (the lead publishes a draft by adding
    it to the nav of mkdocs.yml): they are tested like every other page."""
    nav = (ROOT / "mkdocs.yml").read_text()
    return {
        DOCS / m
        for m in re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?(changes/[\w./-]+\.md)\s*$", nav, re.M)
    }


def doc_files() -> list[Path]:
    """README.md and every page of docs/ but the unpublished drafts of docs/changes/."""
    drafts = published_drafts()
    files = [ROOT / "README.md"]
    files += sorted(p for p in DOCS.rglob("*.md") if DRAFTS not in p.parents or p in drafts)
    return files


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one markdown file, with the annotation before each."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = m["indent"], m["ticks"], m["lang"].lower()
        if not lang:
            raise AssertionError(
                f"{path.relative_to(ROOT)}:{i + 1}: a fence without a "
                f"language (use ```text for output or synopses)"
            )
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks[0] * len(ticks)):
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}:{i + 1}: unclosed fence")
        body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        annotation = None
        if k >= 0 and (a := ANNOTATION.match(lines[k])):
            annotation = (a["word"], a["rest"])
        blocks.append(Block(path, i + 1, lang, "\n".join(body) + "\n", annotation))
        i = j + 1
    return blocks


def snippet_file(line: str) -> tuple[Path, str | None] | None:
    """The file (and section) a ``--8<-- "path[:section]"`` line includes, else None."""
    m = SNIPPET.match(line)
    if not m:
        return None
    path, _, section = m["path"].partition(":")
    return ROOT / path, section or None


def expand_snippets(code: str) -> str:
    """The code with each snippet line replaced by the file (or its section) it includes,
    as pymdownx.snippets does (``# --8<-- [start:NAME]`` ... ``[end:NAME]`` markers)."""
    out = []
    for ln in code.splitlines():
        ref = snippet_file(ln)
        if ref is None:
            out.append(ln)
            continue
        text = ref[0].read_text()
        if ref[1]:
            start, end = f"--8<-- [start:{ref[1]}]", f"--8<-- [end:{ref[1]}]"
            assert start in text and end in text, f"{ref[0]} has no section {ref[1]!r}"
            text = text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0]
            text = text[: text.rfind("\n") + 1]
            text = textwrap.dedent(text)
        out.append(text)
    return "\n".join(out) + "\n"


def collect() -> tuple[list[Block], list[str]]:
    """Runnable blocks (continuation chains folded into their last block) and problems."""
    runnable: list[Block] = []
    problems: list[str] = []
    for path in doc_files():
        last: dict[str, Block] = {}
        try:
            blocks = parse_blocks(path)
        except AssertionError as e:
            problems.append(str(e))
            continue
        if path in RUN_ELSEWHERE:
            continue
        for block in blocks:
            if block.kind == "text":
                if block.lang not in NOT_CODE:
                    problems.append(f"{block.where}: unknown fence language {block.lang!r}")
                if block.annotation:
                    problems.append(f"{block.where}: annotation on a block that is not run")
                continue
            word = block.annotation[0] if block.annotation else None
            if word == "same-as":
                copy_of = ROOT / block.annotation[1]
                if not copy_of.is_file() or copy_of.read_text() != block.code:
                    problems.append(f"{block.where}: not the same text as {block.annotation[1]}")
                continue
            if word not in (None, "skip", "continue"):
                problems.append(f"{block.where}: unknown annotation docs-test: {word}")
                continue
            if word == "skip" and not block.annotation[1]:
                problems.append(f"{block.where}: docs-test: skip needs a reason")
            if word == "continue":
                prev = last.get(block.kind)
                if prev is None:
                    problems.append(f"{block.where}: docs-test: continue with nothing before")
                    continue
                runnable.remove(prev)
                block.chain = [*prev.chain, prev]
            runnable.append(block)
            last[block.kind] = block
    return runnable, problems


BLOCKS, PROBLEMS = collect()


def _is_dag_example(block: Block) -> bool:
    """A block showing (part of) a DAG file of docs/examples/dags/ or dags/: Airflow's DagBag
    loads those (tests/integration/docs/test_dag_examples.py, tests/support/provider_airflow.py)."""
    refs = [r for ln in block.code.splitlines() if (r := snippet_file(ln)) is not None]
    return any(
        r[0].is_relative_to(DAG_EXAMPLES) or r[0].is_relative_to(ROOT / "dags") for r in refs
    )


def example_env(cwd: Path) -> dict[str, str]:
    """A user's shell: this process's environment without what tests configured in it
    (``AIRFLOW__*`` set by tests/support/provider_airflow.py when the same xdist worker ran provider
    tests would point the examples' ``airflow`` commands at that session's Airflow DB)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CKPT_", "AIRFLOW_CONN_", "AIRFLOW__", "PYTEST_"))
    }
    env["PYTHONPATH"] = str(ROOT)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["REPO"] = str(ROOT)  # shell examples may name files of the repository with it
    env["AIRFLOW_HOME"] = str(cwd / "airflow-home")
    return env


def run_block(block: Block, cwd: Path, timeout: float = 420) -> subprocess.CompletedProcess:
    """Run the block (and the blocks it continues) in ``cwd``; on a timeout the whole
    process group is killed, so no command of the example starts anything afterwards.
    The timeout is generous: the CLI walkthroughs take ~15 s on an idle machine, but
    minutes on a machine loaded to 20-50 runnable processes per core."""
    code = "".join(expand_snippets(b.code) for b in [*block.chain, block])
    if block.kind == "python":
        script = cwd / "example.py"
        script.write_text(code)
        cmd = [sys.executable, str(script)]
    else:
        script = cwd / "example.sh"
        script.write_text(code)
        cmd = ["bash", "-euo", "pipefail", str(script)]
    return run_killable(cmd, cwd, example_env(cwd), timeout, "docs test")


def run_killable(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float,
                 who: str) -> subprocess.CompletedProcess:
    """``cmd`` in a session of its own; on a timeout its whole process group is killed and
    stderr says so (``[who] killed after N s``)."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[{who}] killed after {timeout:.0f} s"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def cancel_leftover_jobs(workdir: Path, timeout: float = 60.0) -> None:
    """Cancel the jobs an example left running (it failed before its own ``ckpt cancel``):
    every active job of every metadata DB the example created, including one still
    starting (a detached job's row exists before its first heartbeat)."""
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    for db in workdir.rglob("metadata.db"):
        store = MetadataStore(f"sqlite:///{db}")
        try:
            cancelled: set[str] = set()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                active = [j for j in store.list_jobs() if j.status in ACTIVE]
                if not active:
                    break
                for job in active:
                    if job.heartbeat_at and job.job_id not in cancelled:
                        try:
                            store.submit_control_request(job.job_id, "CANCEL", {})
                            cancelled.add(job.job_id)
                        except ValueError:
                            pass  # ended meanwhile
                time.sleep(0.5)
        finally:
            store.close()


def check_syntax(block: Block, tmp_path: Path) -> None:
    code = "".join(expand_snippets(b.code) for b in [*block.chain, block])
    if block.kind == "python":
        compile(code, block.where, "exec")
    else:
        script = tmp_path / "example.sh"
        script.write_text(code)
        proc = subprocess.run(
            ["bash", "-n", str(script)], capture_output=True, text=True, timeout=30
        )
        assert proc.returncode == 0, f"{block.where}: {proc.stderr}"
