"""Every ``ckpt VERB`` that the README, the docs or a message of the demos tells a user to
run is a real command of the CLI (the demo once suggested ``ckpt list``; the command is
``ckpt jobs``)."""

from __future__ import annotations

import re
from pathlib import Path

import click
from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine.cli import main

ROOT = REPO_ROOT
MENTION = re.compile(r"\bckpt ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)")


def sources() -> list[Path]:
    docs = [
        p
        for p in (ROOT / "docs").rglob("*.md")
        if "changes" not in p.relative_to(ROOT / "docs").parts
    ]
    demos = sorted((ROOT / "airflow_checkpoint_provider").glob("demo*.py"))
    return [ROOT / "README.md", *docs, *demos]


def unknown_commands(text: str) -> set[str]:
    bad = set()
    for m in MENTION.finditer(text):
        words = m.group(1).split()
        cmd = main.commands.get(words[0])
        if cmd is None:
            bad.add(words[0])
        elif isinstance(cmd, click.Group) and (len(words) < 2 or words[1] not in cmd.commands):
            bad.add(" ".join(words))
    return bad


def test_unknown_command_is_found():
    assert unknown_commands("run `ckpt list --db x` then `ckpt jobs`") == {"list"}
    assert unknown_commands("`ckpt state read` and `ckpt db upgrade`") == set()


def test_every_ckpt_command_mentioned_exists():
    bad = {
        str(p.relative_to(ROOT)): found
        for p in sources()
        if (found := unknown_commands(p.read_text()))
    }
    assert not bad, bad
