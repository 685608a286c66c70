"""The deployment page lists Airflow's own settings for a multi-process deployment and the
paused-DAG default (issue 54 item 6), and the UI plugin page does not claim the plugin
needs no authentication. The settings come from tests/support/airflow_deployment.py, the suite's
real multi-process deployments: one it sets that the page does not name fails here."""

from __future__ import annotations

import re

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
PAGE = ROOT / "docs" / "operations" / "deployment.md"
UI_PAGE = ROOT / "docs" / "airflow" / "ui-plugin.md"
DEPLOYMENT = ROOT / "tests" / "support" / "airflow_deployment.py"

#: settings the test deployments tune for a loaded 2-core test machine, not for users
TEST_TUNING = {
    "core.unit_test_mode", "core.parallelism", "dag_processor.refresh_interval",
    "dag_processor.min_file_process_interval", "scheduler.scheduler_heartbeat_sec",
    "triggerer.job_heartbeat_sec", "logging.logging_level",
}


def _settings() -> set[str]:
    found = set(re.findall(r'"AIRFLOW__([A-Z_]+?)__([A-Z_]+)"', DEPLOYMENT.read_text()))
    return {f"{section.lower()}.{key.lower()}" for section, key in found}


def test_the_page_names_every_setting_a_real_deployment_needs():
    page = PAGE.read_text()
    settings = _settings()
    assert {"core.execution_api_server_url", "api_auth.jwt_secret",
            "core.simple_auth_manager_users"} <= settings  # the walk found them
    missing = sorted(s for s in settings - TEST_TUNING
                     if f"[{s.split('.')[0]}] {s.split('.')[1]}" not in page)
    assert not missing, f"docs/operations/deployment.md does not name {missing}"


def test_the_page_says_new_dags_start_paused_and_how_to_unpause():
    page = PAGE.read_text()
    assert "[core] dags_are_paused_at_creation" in page
    assert "every new DAG starts paused" in page and "airflow dags unpause" in page


def test_the_ui_plugin_page_says_it_needs_a_login():
    page = UI_PAGE.read_text()
    assert "without its own\nauthentication" not in page and "no authentication" not in page
    assert "401" in page and "/auth/token" in page
    limits = (ROOT / "docs" / "reference" / "limits.md").read_text()
    assert "has no authentication of its own" not in limits
