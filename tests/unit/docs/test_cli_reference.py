"""The CLI reference (docs/reference/cli.md) and the ``ckpt`` command tree agree in both
directions (issue 56): the page's synopsis is generated from the click definitions
(:mod:`airflow_checkpoint_provider.engine.cli.reference`, included from
docs/reference/cli-synopsis.txt), so a command or option added without regenerating it fails
here, and so does a command or option the page names that does not exist."""

from __future__ import annotations

import re

import click
from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine.cli import main
from airflow_checkpoint_provider.engine.cli.reference import commands, synopsis

ROOT = REPO_ROOT
PAGE = ROOT / "docs" / "reference" / "cli.md"
SYNOPSIS = ROOT / "docs" / "reference" / "cli-synopsis.txt"
INCLUDE = '--8<-- "docs/reference/cli-synopsis.txt"'
REGENERATE = (
    "python -m airflow_checkpoint_provider.engine.cli.reference > docs/reference/cli-synopsis.txt"
)
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
COMMAND_WORD = re.compile(r"[a-z][a-z-]*")


def command_options(group: click.Group) -> dict[str, set[str]]:
    """``{"run": {"--restore", ...}, "cdc drop-slot": {...}}``: every leaf command's options."""
    return {
        " ".join(path): {
            opt
            for p in cmd.params
            if isinstance(p, click.Option) and not p.hidden
            for opt in (*p.opts, *p.secondary_opts)
        }
        for path, cmd in commands(group)
    }


def synopsis_entries(text: str) -> dict[str, set[str]]:
    """The synopsis's commands (the words after ``ckpt`` before the first argument or option)
    with the options each entry names."""
    entries: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("ckpt "):
            words = line.split()[1:]
            path = []
            for word in words:
                if not COMMAND_WORD.fullmatch(word):
                    break
                path.append(word)
            current = " ".join(path)
            entries[current] = [line]
        elif line.startswith(" ") and current is not None:
            entries[current].append(line)
        else:
            current = None  # a comment or a blank line ends the entry
    return {path: set(OPTION.findall(" ".join(lines))) for path, lines in entries.items()}


def synopsis_problems(text: str, group: click.Group) -> list[str]:
    """Commands and options of the tree the synopsis misses, and ones it names that the tree
    does not have."""
    tree, page = command_options(group), synopsis_entries(text)
    problems = [f"not in the synopsis: ckpt {c}" for c in sorted(tree.keys() - page.keys())]
    problems += [f"no such command: ckpt {c}" for c in sorted(page.keys() - tree.keys())]
    for cmd in sorted(tree.keys() & page.keys()):
        problems += [f"not in the synopsis: ckpt {cmd} {o}" for o in sorted(tree[cmd] - page[cmd])]
        problems += [f"no such option: ckpt {cmd} {o}" for o in sorted(page[cmd] - tree[cmd])]
    return problems


def prose_problems(text: str, group: click.Group) -> list[str]:
    """Options and commands the hand-written part of the page names that do not exist: an
    option anywhere must be one of some command, and :func:`span_problems`."""
    tree = command_options(group)
    every = set().union(*tree.values())
    problems = [f"no such option: {o}" for o in sorted(set(OPTION.findall(text)) - every)]
    return problems + span_problems(text, group)


def span_problems(text: str, group: click.Group) -> list[str]:
    """In each code span ``ckpt CMD ... --opt`` of ``text``: the command exists and has
    the option."""
    tree = command_options(group)
    problems = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for m in re.finditer(r"\bckpt((?: [a-z][a-z-]*)+)(.*)", span):
            words = m.group(1).split()
            cmd = next(
                (" ".join(words[:n]) for n in (2, 1) if " ".join(words[:n]) in tree), None
            )
            if cmd is None:
                if words[0] not in {p.split()[0] for p in tree}:
                    problems.append(f"no such command: ckpt {words[0]}")
                continue
            problems += [
                f"no such option: ckpt {cmd} {o}"
                for o in OPTION.findall(m.group(0))
                if o not in tree[cmd]
            ]
    return problems


def _toy_cli() -> click.Group:
    @click.group()
    def toy():
        pass

    @toy.command()
    @click.argument("job")
    @click.option("--db")
    @click.option("--json", is_flag=True)
    def jobs(job, db, json):
        """List jobs."""

    @toy.group()
    def cdc():
        pass

    @cdc.command("drop-slot")
    @click.option("--url", required=True)
    def drop_slot(url):
        """Drop a slot."""

    return toy


def test_a_command_or_option_out_of_step_is_found():
    toy = _toy_cli()
    page = synopsis(toy)
    assert "ckpt jobs JOB [--db URL] [--json]" in page
    assert synopsis_problems(page, toy) == []
    # an option added to the code, not to the page
    toy.commands["jobs"].params.append(click.Option(["--name"]))
    assert synopsis_problems(page, toy) == ["not in the synopsis: ckpt jobs --name"]
    # a command added to the code; a page naming what does not exist
    toy.commands["cdc"].add_command(click.Command("copy-slot"))
    stale = page + "\n# Old.\nckpt list [--db URL]\n"
    assert synopsis_problems(stale.replace("[--json]", "[--json] [--tasks]"), toy) == [
        "not in the synopsis: ckpt cdc copy-slot",
        "no such command: ckpt list",
        "not in the synopsis: ckpt jobs --name",
        "no such option: ckpt jobs --tasks",
    ]
    assert prose_problems("`ckpt jobs --db x --tasks`, `--detach`, `ckpt list`", toy) == [
        "no such option: --detach",
        "no such option: --tasks",
        "no such option: ckpt jobs --tasks",
        "no such command: ckpt list",
    ]
    assert prose_problems("`ckpt cdc drop-slot --url U` and `ckpt jobs J --json`", toy) == []


def test_the_synopsis_is_generated_from_the_command_tree():
    assert SYNOPSIS.read_text() == synopsis(main), f"regenerate it: {REGENERATE}"
    page = PAGE.read_text()
    assert f"```text\n{INCLUDE}\n```" in page, "cli.md includes the generated synopsis"


def test_the_synopsis_names_every_command_and_option_and_no_other():
    problems = synopsis_problems(SYNOPSIS.read_text(), main)
    assert not problems, f"{problems}; regenerate it: {REGENERATE}"


def test_the_cli_page_names_no_command_or_option_that_does_not_exist():
    problems = prose_problems(PAGE.read_text(), main)
    assert not problems, problems


def test_code_spans_of_the_docs_name_options_their_command_has():
    """README.md and the published pages: ``ckpt savepoint JOB --dir D`` names an option of
    ``ckpt savepoint`` (their shell examples run in test_docs_examples.py)."""
    pages = [ROOT / "README.md"] + [
        p for p in (ROOT / "docs").rglob("*.md") if "changes" not in p.relative_to(ROOT).parts
    ]
    bad = {
        str(p.relative_to(ROOT)): found for p in pages if (found := span_problems(p.read_text(), main))
    }
    assert not bad, bad
