"""The error messages docs/how-to/troubleshooting.md quotes are the code's own: each
literal part of each quoted message (between ``<placeholders>``) occurs in a string
literal of the package (f-strings and implicitly concatenated strings joined as Python
joins them), so a reworded message fails here until the page follows."""

from __future__ import annotations

import ast
import re

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
PAGE = ROOT / "docs" / "how-to" / "troubleshooting.md"
PLACEHOLDER = re.compile(r"<[^<>]+>")


def message_templates() -> list[str]:
    """Every string literal of the package, formatted values replaced by NUL."""
    out = []
    for path in (ROOT / "airflow_checkpoint_provider").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                out.append(
                    "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
                )
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
    return out


def quoted_messages() -> list[str]:
    return re.findall(r"```text\n(.*?)\n```", PAGE.read_text(), flags=re.S)


def missing_parts(message: str, templates: list[str]) -> list[str]:
    parts = [p.strip() for p in PLACEHOLDER.split(message)]
    text = "\n".join(templates)
    return [p for p in parts if len(p) >= 4 and p not in text]


def test_a_reworded_message_is_found():
    templates = ["job name \0 is in use by live job \0 (\0); stop"]
    assert missing_parts("job name <n> is in use by live job <id> (<s>); stop", templates) == []
    assert missing_parts("job name <n> is busy", templates) == ["is busy"]


def test_quoted_messages_occur_in_the_code():
    templates = message_templates()
    messages = quoted_messages()
    assert len(messages) >= 10
    bad = {m[:60]: missing for m in messages if (missing := missing_parts(m, templates))}
    assert not bad, bad
