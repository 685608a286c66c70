"""The DAG author's guide's examples are real DAG files (docs/examples/dags/): Airflow's
DagBag parses them without import errors, each defines its DAGs, and each is shown in the
docs (a snippet include), so none is orphaned or rots."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from repo_paths import REPO_ROOT

# find_spec, not importorskip: importing airflow here would read its configuration before
# tests/support/provider_airflow.py points AIRFLOW_HOME at its private home (same xdist worker)
if importlib.util.find_spec("airflow") is None:
    pytest.skip("the DAG examples need the `airflow` extra", allow_module_level=True)

ROOT = REPO_ROOT
DAG_EXAMPLES = ROOT / "docs" / "examples" / "dags"

#: the DAG ids each example file defines
EXPECTED = {
    "quickstart.py": {"orders_pipeline"},
    "operators.py": {"operator_examples"},
    "sensors.py": {"sensor_examples"},
    "assets.py": {"verify_orders_savepoints", "on_orders_committed", "orders_freshness"},
    "deferring_operator.py": {"trigger_examples"},
    "conf_choices.py": {"conf_choices"},
    "my_blue_green.py": {"orders_blue_green", "orders_upgrade", "orders_savepoints"},
    "hooks.py": {"hook_examples"},
}

_PARSE = """
import json, sys
from pathlib import Path
from airflow.dag_processing.dagbag import DagBag
folder = Path(sys.argv[1])
bag = DagBag(dag_folder=str(folder), bundle_path=folder,
             bundle_name="docs-examples")
by_file = {}
for dag in bag.dags.values():
    by_file.setdefault(Path(dag.fileloc).name, []).append(dag.dag_id)
print(json.dumps({"errors": {Path(k).name: v for k, v in bag.import_errors.items()},
                  "dags": by_file, "tasks": {d.dag_id: len(d.tasks) for d in bag.dags.values()}}))
"""


@pytest.mark.timeout(180)
def test_dag_examples_parse_without_import_errors(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CKPT_"))}
    env.update(
        AIRFLOW_HOME=str(tmp_path),
        PYTHONPATH=str(ROOT),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path}/airflow.db",
    )
    proc = subprocess.run(
        [sys.executable, "-c", _PARSE, str(DAG_EXAMPLES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert {f: set(ids) for f, ids in result["dags"].items()} == EXPECTED
    assert result["tasks"]["operator_examples"] == 17  # the 16 operator classes (submit twice)


def test_every_dag_example_is_shown_in_the_docs():
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
    files = sorted(p.name for p in DAG_EXAMPLES.glob("*.py"))
    assert files == sorted(EXPECTED)
    missing = [f for f in files if f'--8<-- "docs/examples/dags/{f}' not in docs]
    assert not missing, missing


def test_every_operator_sensor_and_hook_class_is_used_in_an_example_dag():
    """Each operator page shows an example DAG: a new operator, sensor or hook class without one
    fails here (the classes read from the source, no import of Airflow)."""
    import ast

    package = ROOT / "airflow_checkpoint_provider"
    classes = set()
    for folder in ("operators", "sensors", "hooks"):
        for path in (package / folder).glob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and node.name.endswith(("Operator", "Sensor", "Hook")) \
                        and not node.name.startswith("_") and not node.name.endswith("BaseOperator"):
                    classes.add(node.name)
    assert {"CutOverOperator", "KafkaCaughtUpSensor", "CheckpointMetadataHook"} <= classes
    examples = "\n".join(p.read_text() for p in DAG_EXAMPLES.glob("*.py"))
    # the submit hook is the submit operator's; DAG authors use the operator
    missing = sorted(c for c in classes - {"CheckpointSubmitHook"} if f"{c}(" not in examples)
    assert not missing, f"no example DAG uses {missing}"
