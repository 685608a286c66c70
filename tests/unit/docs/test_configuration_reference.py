"""The configuration reference (docs/reference/configuration.md) has a row for every field
of ``CheckpointConfig`` and ``RestartStrategy`` and every parameter of ``Pipeline`` and
``Pipeline.run``, and no row for one the code does not have (issue 56: six were missing).
Each has its own section (``## `Pipeline.run` ``) whose table's first column names them."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable

from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy

ROOT = REPO_ROOT
PAGE = ROOT / "docs" / "reference" / "configuration.md"
SECTION = re.compile(r"^## (.+?)\s*$", re.M)  # every section; ours are titled `Name`
ROW = re.compile(r"^\| `(\*{0,2}\w+)` \|", re.M)


def dataclass_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]


def parameters(func: Callable) -> list[str]:
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [
        prefix.get(p.kind, "") + name
        for name, p in inspect.signature(func).parameters.items()
        if name != "self"
    ]


def in_code() -> dict[str, list[str]]:
    return {
        "CheckpointConfig": dataclass_fields(CheckpointConfig),
        "RestartStrategy": dataclass_fields(RestartStrategy),
        "Pipeline": parameters(Pipeline.__init__),
        "Pipeline.run": parameters(Pipeline.run),
    }


def documented(page: str) -> dict[str, list[str]]:
    """``{section title: names in the first column of its table}``."""
    parts = SECTION.split(page)
    return {
        title.strip("`"): ROW.findall(body)
        for title, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def differences(code: dict[str, list[str]], page: dict[str, list[str]]) -> list[str]:
    problems = []
    for section, names in code.items():
        rows = page.get(section)
        if rows is None:
            problems.append(f"no section ## `{section}`")
            continue
        problems += [f"{section}: {n} has no row" for n in names if n not in rows]
        problems += [f"{section}: row {n} is not in the code" for n in rows if n not in names]
    return problems


def test_a_field_added_without_docs_is_found():
    @dataclasses.dataclass
    class Config:
        interval_ms: int = 1000
        savepoint_directory: str | None = None
        _private: int = 0

    def run(self, runner="local", *, fence_sinks=False, **runner_options):
        pass

    page = """## `Config`

| field | default | meaning |
|---|---|---|
| `interval_ms` | 1000 | periodic checkpoints |
| `retained` | 3 | gone from the code |

## `Pipeline.run`

| `runner` | `local` | ... |
| `**runner_options` | - | ... |

## Environment variables

| `CKPT_METADATA_URL` | ... |
"""
    code = {"Config": dataclass_fields(Config), "Pipeline.run": parameters(run)}
    assert differences(code, documented(page)) == [
        "Config: savepoint_directory has no row",
        "Config: row retained is not in the code",
        "Pipeline.run: fence_sinks has no row",
    ]
    assert differences({"Pipeline": ["name"]}, documented(page)) == ["no section ## `Pipeline`"]


def test_every_option_is_in_the_configuration_reference():
    problems = differences(in_code(), documented(PAGE.read_text()))
    assert not problems, problems
