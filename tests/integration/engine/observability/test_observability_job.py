"""Statistics and the report of a real job: periodic checkpoints, one savepoint, one failure.

One job runs once for the module (local runner, about 10 s): 12,000 records at 3,000/s with
a checkpoint every 100 ms (about 40 checkpoints), a savepoint requested through the metadata
DB once it runs, and an injected failure in the snapshot of checkpoint 12, which fails that
checkpoint and restarts the job from the latest completed one.
"""

import base64
import json
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
from PIL import Image, ImageStat
from pipelines import Background, FaultPlan, running_sum_pipeline

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.lifecycle.report import render_report
from airflow_checkpoint_provider.engine.lifecycle.stats import checkpoint_statistics

pytestmark = pytest.mark.slow

FAILED_CHECKPOINT = 12
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHART_COLORS = {  # line colors of the three charts (see report.py)
    "duration": (0x1F, 0x77, 0xB4),
    "uploaded size": (0xFF, 0x7F, 0x0E),
    "alignment": (0x94, 0x67, 0xBD),
    "savepoint": (0x2C, 0xA0, 0x2C),
    "restart / failure": (0xD6, 0x27, 0x28),
}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("observed"))
    faults = FaultPlan(os.path.join(root, "faults"), [("snapshot", FAILED_CHECKPOINT)])
    pipeline = running_sum_pipeline(root, num_records=12_000, rate=3000, interval_ms=100,
                                    faults=faults)
    bg = Background(pipeline)
    running = bg.wait_running(min_checkpoints=2)
    savepoint = bg.request(running.job_id, "SAVEPOINT")  # to the default savepoint directory
    assert savepoint.status == "SUCCEEDED", savepoint.error
    assert savepoint.result["checkpoint_id"] < FAILED_CHECKPOINT, "savepoint hit the fault"
    result = bg.result(timeout=150)
    assert result.status == "FINISHED"
    store = MetadataStore(pipeline.metadata_url)
    yield {"root": root, "store": store, "result": result, "savepoint": savepoint.result}
    store.close()


@pytest.mark.timeout(240)
def test_statistics_count_checkpoints_failures_savepoints_and_restores(job):
    store, result = job["store"], job["result"]
    stats = checkpoint_statistics(store, result.job_id)
    json.dumps(stats)  # JSON-ready

    counts = stats["counts"]
    assert counts["completed"] >= 20
    assert counts["completed"] == result.checkpoints_completed
    assert counts["failed"] == result.checkpoints_failed >= 1
    assert counts["in_progress"] == 0
    assert counts["total"] == counts["completed"] + counts["failed"]
    assert counts["restarts"] == result.restarts == 1
    assert counts["restored"] == 1
    assert counts["savepoints"] == 1

    latest = stats["latest"]
    assert latest["failed"]["checkpoint_id"] == FAILED_CHECKPOINT
    assert f"injected failure snapshot {FAILED_CHECKPOINT}" in latest["failed"]["failure_reason"]
    assert latest["savepoint"]["checkpoint_id"] == job["savepoint"]["checkpoint_id"]
    assert latest["savepoint"]["location"] == job["savepoint"]["location"]
    assert latest["completed"]["location"] == result.latest_checkpoint
    assert latest["completed"]["kind"] == "CHECKPOINT"
    restored = latest["restored"]
    attempts = store.list_attempts(result.job_id)
    assert restored["attempt"] == 1 == attempts[-1].attempt
    assert restored["restored_checkpoint_id"] == attempts[-1].restored_checkpoint_id
    assert restored["restored_checkpoint_id"] < FAILED_CHECKPOINT
    assert restored["is_savepoint"] is False
    assert "injected failure" in restored["previous_failure_reason"]


@pytest.mark.timeout(240)
def test_statistics_summaries_match_the_checkpoint_rows(job):
    store, result = job["store"], job["result"]
    stats = checkpoint_statistics(store, result.job_name)  # a job name resolves too
    rows = [c for c in store.list_checkpoints(result.job_id)
            if c.status in ("COMPLETED", "SUBSUMED")]
    durations = sorted(c.duration_ms for c in rows)
    summary = stats["summary"]["end_to_end_duration_ms"]
    assert summary["count"] == len(rows)
    assert (summary["min"], summary["max"]) == (durations[0], durations[-1])
    assert summary["min"] <= summary["p50"] <= summary["p90"] <= summary["p99"] <= summary["max"]
    assert summary["avg"] == pytest.approx(sum(durations) / len(durations), abs=1e-3)
    assert stats["summary"]["state_size"]["max"] == max(c.state_size for c in rows)
    assert stats["summary"]["checkpointed_size"]["min"] > 0
    tasks = [t for c in rows for t in c.task_stats]
    for key in ("sync_duration_ms", "async_duration_ms", "alignment_duration_ms"):
        task_summary = stats["summary"][key]
        assert task_summary["count"] == len(tasks)
        assert 0 <= task_summary["min"] <= task_summary["avg"] <= task_summary["max"]
    assert [h["checkpoint_id"] for h in stats["history"]] == sorted(
        (c.checkpoint_id for c in store.list_checkpoints(result.job_id)), reverse=True)[:10]


def _chart_images(page: str) -> dict[str, bytes]:
    found = re.findall(r'<img class="chart" id="chart-(\w+)"[^>]*src="data:image/png;base64,'
                       r'([A-Za-z0-9+/=]+)"', page)
    return {key: base64.b64decode(data) for key, data in found}


def _png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(PNG_SIGNATURE)
    return struct.unpack(">II", data[16:24])


@pytest.mark.timeout(240)
def test_html_report_is_self_contained_with_charts_and_tables(job, tmp_path):
    store, result = job["store"], job["result"]
    out = render_report(store, result.job_id, tmp_path / "report" / "report.html")
    page = out.read_text(encoding="utf-8")

    charts = _chart_images(page)
    assert set(charts) == {"duration", "size", "alignment"}
    for data in charts.values():
        width, height = _png_size(data)
        assert width >= 800 and height >= 250
    # nothing to fetch: no scripts, stylesheets, fonts or images from elsewhere
    assert "<script" not in page
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "url(" not in page
    # summary, latest and per-task tables
    counts = re.search(r'<table id="counts">(.*?)</table>', page, re.S).group(1)
    assert f"<td>{result.checkpoints_completed}</td>" in counts
    assert f"injected failure snapshot {FAILED_CHECKPOINT}" in page
    assert job["savepoint"]["location"] in page
    tasks = re.search(r'<table id="tasks">(.*?)</table>', page, re.S).group(1)
    assert tasks.count('<tr class="slowest">') == 1
    assert 'class="badge">slowest' in tasks
    assert tasks.count("<tr") == 1 + 5  # header + 2 source and 3 keyed subtasks


@pytest.mark.timeout(240)
def test_png_report_holds_the_three_charts(job, tmp_path):
    out = render_report(job["store"], job["result"].job_id, tmp_path / "report.png", fmt="png")
    with Image.open(out) as image:
        assert image.format == "PNG"
        assert image.size == (1200, 1100)
        rgb = image.convert("RGB")
        for name, color in CHART_COLORS.items():
            assert _pixels_near(rgb, color) > 20, f"no {name} pixels in the PNG report"


def test_render_report_refuses_an_unknown_format(job, tmp_path):
    with pytest.raises(ValueError, match="'pdf' is unknown"):
        render_report(job["store"], job["result"].job_id, tmp_path / "r.pdf", fmt="pdf")


def _pixels_near(image: Image.Image, color: tuple[int, int, int], tolerance: int = 12) -> int:
    """How many pixels are within ``tolerance`` of ``color`` on every channel."""
    pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    close = np.abs(pixels - np.array(color, dtype=np.int16)) <= tolerance
    return int(close.all(axis=2).sum())


# -- in a real browser ------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--enable-logging=stderr", "--v=0"]


def _chromium(tmp_path, name: str, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{name}"
    profile.mkdir()
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "Uncaught" in line or "ERROR:CONSOLE" in line or ":CONSOLE(" in line]


@pytest.mark.timeout(300)
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                    "(Debian: apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(job, tmp_path):
    page = render_report(job["store"], job["result"].job_id, tmp_path / "report.html")
    url = page.resolve().as_uri()

    shot = tmp_path / "report-screenshot.png"
    run = _chromium(tmp_path, "shot", f"--screenshot={shot}", "--window-size=1400,2400", url)
    assert run.returncode == 0, run.stderr[-2000:]
    assert not _console_errors(run.stderr), _console_errors(run.stderr)
    with Image.open(shot) as image:
        assert image.size == (1400, 2400)
        rgb = image.convert("RGB")
        assert max(ImageStat.Stat(rgb.convert("L")).stddev) > 20, "blank screenshot"
        for name, color in CHART_COLORS.items():
            assert _pixels_near(rgb, color) > 20, f"no {name} pixels on the rendered page"

    dom = _chromium(tmp_path, "dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not _console_errors(dom.stderr), _console_errors(dom.stderr)
    charts = _chart_images(dom.stdout)
    assert set(charts) == {"duration", "size", "alignment"}
    assert all(len(data) > 10_000 and data.startswith(PNG_SIGNATURE)
               for data in charts.values())
    assert '<tr class="slowest">' in dom.stdout
