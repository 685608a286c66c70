"""The connector table of docs/reference/connectors.md says where each connector is
imported from (a new user could not tell where ``PostgresSink`` lives): every row's class
imports from the module it names."""

from __future__ import annotations

import importlib
import re

from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine.settings import INTERNAL, SETTINGS

ROOT = REPO_ROOT


def connector_rows() -> list[tuple[str, str]]:
    rows = []
    for line in (ROOT / "docs" / "reference" / "connectors.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5:
            rows.append((cells[0].split("`")[1].split("(")[0], cells[1].strip("`")))
    return rows


def test_every_connector_imports_from_where_the_table_says():
    rows = connector_rows()
    names = {name for name, _ in rows}
    assert {
        "PostgresSink",
        "DeltaSink",
        "IcebergSink",
        "PostgresCdcSource",
        "FileSink",
        "FileSource",
        "GeneratorSource",
        "DeltaTableSource",
        "IcebergTableSource",
    } <= names
    wrong = [
        (name, module)
        for name, module in rows
        if not hasattr(importlib.import_module(module), name)
    ]
    assert not wrong, wrong


def test_environment_table_names_the_variables_the_code_reads():
    code = "\n".join(p.read_text() for p in (ROOT / "airflow_checkpoint_provider").rglob("*.py"))
    in_code = set(re.findall(r"\bCKPT_[A-Z0-9_]*[A-Z0-9]\b", code))
    not_settings = {v for v in in_code if v.startswith(("CKPT_EXAMPLE_", "CKPT_DEMO_"))}
    not_settings |= set(INTERNAL) | {"CKPT_CDC_TABLES"}
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    table = set(re.findall(r"^\| `(CKPT_[A-Z0-9_]+)` \|", page, flags=re.M))
    assert table == in_code - not_settings, (table - in_code, in_code - not_settings - table)


def environment_rows() -> dict[str, str]:
    """``{variable: default column}`` of the environment table."""
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    return {m[1]: m[2].strip() for m in re.finditer(
        r"^\| `(CKPT_[A-Z0-9_]+)` \|([^|]*)\|", page, flags=re.M)}


def test_environment_table_lists_every_engine_setting_with_its_default():
    """The engine's variables are declared in engine/settings.py: each has a row whose
    default is the one the settings module shows (a new setting without a row, or a default
    changed in one place only, fails here); the engine's internal ones have none."""
    rows = environment_rows()
    missing = sorted(set(SETTINGS) - set(INTERNAL) - set(rows))
    assert not missing, f"engine settings without a row in the environment table: {missing}"
    wrong = {name: (rows[name], s.shown) for name, s in SETTINGS.items()
             if name in rows and rows[name] != s.shown}
    assert not wrong, f"table default != settings' shown default: {wrong}"
    assert not set(INTERNAL) & set(rows)
