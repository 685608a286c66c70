"""The provider's public operator, sensor and trigger classes, found in the source with
``ast`` (nothing is imported: a docs test must not import Airflow before
tests/support/provider_airflow.py points AIRFLOW_HOME at its private home).

A class counts when it is defined in a module of ``operators/``, ``sensors/`` or
``triggers/``, derives (through classes of the package) from one of Airflow's bases, and is
neither private (``_Name``) nor a base class of its own (``...Base...``, ``...Mixin``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "airflow_checkpoint_provider"
PACKAGE = "airflow_checkpoint_provider"
ROLES = ("operators", "sensors", "triggers")
AIRFLOW_BASES = {"BaseOperator", "BaseSensorOperator", "BaseTrigger", "BaseEventTrigger"}


@dataclass(frozen=True)
class ProviderClass:
    role: str  # operators, sensors or triggers
    module: str  # airflow_checkpoint_provider.operators.submit
    name: str  # SubmitCheckpointedJobOperator

    @property
    def path(self) -> str:
        return f"{self.module}.{self.name}"


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _is_public(name: str) -> bool:
    return not name.startswith("_") and "Base" not in name and not name.endswith("Mixin")


def public_classes(package_dir: Path = PACKAGE_DIR) -> list[ProviderClass]:
    defined: dict[str, tuple[str, str, list[str]]] = {}  # name -> (role, module, bases)
    for role in ROLES:
        for path in sorted((package_dir / role).glob("*.py")):
            module = f"{PACKAGE}.{role}.{path.stem}"
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    defined[node.name] = (role, module, [_base_name(b) for b in node.bases])

    def derives(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in AIRFLOW_BASES:
            return True
        if name not in defined or name in seen:
            return False
        return any(derives(b, seen | {name}) for b in defined[name][2])

    return [
        ProviderClass(role, module, name)
        for name, (role, module, _) in defined.items()
        if _is_public(name) and derives(name) and module.rsplit(".", 1)[1] != "__init__"
    ]
