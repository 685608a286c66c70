"""The synopsis of the CLI reference (docs/reference/cli.md), generated from the click
command tree, so the page names every command and option and no other::

    python -m airflow_checkpoint_provider.engine.cli.reference > docs/reference/cli-synopsis.txt

One entry per command (subcommands of a group as ``ckpt GROUP VERB``): a comment with the
first sentence of its help, then its arguments and options, required ones bare, optional ones
in ``[...]``, repeatable ones with ``...``. tests/unit/docs/test_cli_reference.py regenerates it
and fails when the committed file differs (a command or option added without the page).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator

import click

WIDTH = 92
NBSP = "\u00a0"  # joins an option to its value while wrapping
#: the value an option takes, as the synopsis shows it (cosmetic: an option not named here
#: shows its own name in capitals, e.g. ``--holder HOLDER``)
VALUE_NAMES = {
    "--db": "URL",
    "--metadata-url": "URL",
    "--url": "URL",
    "--master": "URL",
    "--postgres": "URL",
    "--restore": "latest|PATH|standby:JOB",
    "--restart": "none|fixed:N:MS|exponential:N:MS:MAX",
    "--checkpoint-dir": "DIR",
    "--savepoint-dir": "DIR",
    "--dir": "DIR",
    "--log-file": "FILE",
    "--out": "FILE",
    "--table": "FILE",
    "--output": "PATH",
    "--from": "SOURCE",
    "--to": "SLOT",
    "--slot": "SLOT",
    "--publication": "NAME",
    "--timeout": "SECONDS",
    "--wait-timeout": "SECONDS",
    "--ttl": "SECONDS",
    "--max-age": "SECONDS",
    "--interval-ms": "MS",
    "--coordinator-port": "PORT",
    "--metrics-port": "PORT",
    "--parallelism": "N",
    "--max-count": "N",
    "--sample-key-groups": "K",
    "--job-id": "ID",
    "--job-name": "NAME",
    "--name": "NAME",
    "--state": "NAME",
    "--from-job": "JOB",
    "--to-job": "JOB",
    "--reason": "TEXT",
    "--pipeline": "module:function",
    "--drop-key": "KEY",
}


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], click.Command]]:
    """(path, command) of every leaf command: a group's own verbs first, then its groups'."""
    ctx = click.Context(group)
    names = [n for n in group.list_commands(ctx) if not group.get_command(ctx, n).hidden]
    subgroups = []
    for name in names:
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            subgroups.append((name, cmd))
        else:
            yield (*prefix, name), cmd
    for name, sub in subgroups:
        yield from commands(sub, (*prefix, name))


def _value(param: click.Option, opt: str) -> str:
    if param.metavar:
        return param.metavar
    if isinstance(param.type, click.Choice):
        return "|".join(str(c) for c in param.type.choices)
    return VALUE_NAMES.get(opt, opt.lstrip("-").upper())


def usage_words(cmd: click.Command) -> list[str]:
    """The command's arguments and options as synopsis words."""
    words = []
    for param in cmd.params:
        if isinstance(param, click.Argument):
            name = param.human_readable_name.upper()
            name += " ..." if param.nargs == -1 else ""
            words.append(name if param.required else f"[{name}]")
        elif isinstance(param, click.Option) and not param.hidden:
            if param.name == "help":
                continue
            opt = max(param.opts, key=len)
            if param.secondary_opts:
                opt += "/" + max(param.secondary_opts, key=len)
            word = opt if param.is_flag or param.count else f"{opt}{NBSP}{_value(param, opt)}"
            if param.multiple:
                word += f"{NBSP}..."
            words.append(word if param.required else f"[{word}]")
    return words


def first_sentence(cmd: click.Command) -> str:
    text = " ".join((cmd.help or "").strip().split("\n\n", 1)[0].split())
    text = text.split("\b", 1)[0].replace("``", "").strip()
    return re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]


def synopsis(group: click.Group, prog: str = "ckpt") -> str:
    """The synopsis text: one entry per command, separated by blank lines."""
    entries = []
    for path, cmd in commands(group):
        head = " ".join((prog, *path))
        comment = textwrap.wrap(first_sentence(cmd), WIDTH - 2)
        lines = [f"# {line}" for line in comment]
        usage = textwrap.wrap(
            " ".join([head, *usage_words(cmd)]),
            WIDTH,
            subsequent_indent=" " * (len(head) + 1),
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines += [line.replace(NBSP, " ") for line in usage]
        entries.append("\n".join(lines))
    return "\n\n".join(entries) + "\n"


def main() -> None:
    from . import main as ckpt

    click.echo(synopsis(ckpt), nl=False)


if __name__ == "__main__":
    main()
