"""The README's picture: the checkpoint report (``ckpt report``, the page the Airflow UI plugin
serves at ``/checkpoints/jobs/<job_id>``) of a fixed small job, rendered by headless Chromium.

``python tools/docs/readme_picture.py`` (from the repository root, with the venv and
``chromium``) rebuilds the job in a temporary SQLite metadata DB, renders its report and
writes ``docs/report.png``. The PNG carries, in a ``tEXt`` chunk, the fingerprint of the
page's structure (headings, table headers, charts); tests/integration/docs/test_readme_picture.py
renders the report of the same job again and fails when the fingerprint differs, so a
change to the report that would make the picture outdated is caught.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PICTURE = ROOT / "docs" / "report.png"
KEY = "report-structure"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
JOB_ID = "0f3c9a1e" + "0" * 24
WIDTH, HEIGHT = 1280, 1600


def build_job(url: str) -> str:
    """A job ``orders`` at parallelism 2: 24 checkpoints a minute apart, a savepoint, one
    failed checkpoint and a restart from the checkpoint before it; returns its id."""
    from sqlalchemy import create_engine, update

    from airflow_checkpoint_provider.engine.catalog import MetadataStore, upgrade_database
    from airflow_checkpoint_provider.engine.catalog.models import JobAttemptRow, JobRow

    upgrade_database(url)
    with MetadataStore(url) as store:
        store.create_job(job_id=JOB_ID, job_name="orders", parallelism=2, version="v2")
        store.start_attempt(JOB_ID, 0, restored_checkpoint_id=None, restored_from=None)
        for chk in range(1, 25):
            at = T0 + timedelta(minutes=chk)
            if chk == 13:
                store.add_pending_checkpoint(
                    JOB_ID,
                    chk,
                    kind="CHECKPOINT",
                    trigger_time=at,
                    location=f"/data/ckpt/orders/{JOB_ID}/chk-{chk}",
                )
                store.fail_checkpoint(JOB_ID, chk, reason="task 1.1 failed: ConnectionResetError")
                store.end_attempt(JOB_ID, 0, failure_reason="task 1.1 failed: ConnectionResetError")
                store.start_attempt(
                    JOB_ID,
                    1,
                    restored_checkpoint_id=12,
                    restored_from=f"/data/ckpt/orders/{JOB_ID}/chk-12",
                )
                continue
            kind = "SAVEPOINT" if chk == 8 else "CHECKPOINT"
            location = (
                f"/data/savepoints/savepoint-{JOB_ID[:6]}-{chk}"
                if kind == "SAVEPOINT"
                else f"/data/ckpt/orders/{JOB_ID}/chk-{chk}"
            )
            store.add_pending_checkpoint(JOB_ID, chk, kind=kind, trigger_time=at, location=location)
            duration = 180 + (chk * 37) % 160 + (400 if chk == 14 else 0)
            tasks = [
                {
                    "vertex": v,
                    "subtask": s,
                    "sync_ms": 2.0 + v + s,
                    "async_ms": 40.0 + 30 * v + 7 * s,
                    "alignment_ms": (4.0 + 9 * s + (chk * 5) % 11) * v,
                    "state_size": (v * 2 + s) * 180_000,
                    "checkpointed_size": (v * 2 + s) * 45_000,
                }
                for v in range(2)
                for s in range(2)
            ]
            store.complete_checkpoint(
                JOB_ID,
                chk,
                complete_time=at + timedelta(milliseconds=duration),
                duration_ms=duration,
                state_size=1_300_000 + chk * 25_000,
                checkpointed_size=260_000 + (chk % 5) * 40_000,
                task_stats=tasks,
            )
        store.set_job_status(JOB_ID, "RUNNING")
    # fixed times for what the store stamps with the clock
    engine = create_engine(url)
    with engine.begin() as conn:
        attempts = update(JobAttemptRow).where(JobAttemptRow.job_id == JOB_ID)
        conn.execute(attempts.where(JobAttemptRow.attempt == 0).values(started_at=T0))
        restart = T0 + timedelta(minutes=13, seconds=20)
        conn.execute(attempts.where(JobAttemptRow.attempt == 1).values(started_at=restart))
        conn.execute(update(JobRow).where(JobRow.job_id == JOB_ID).values(created_at=T0))
    engine.dispose()
    return JOB_ID


def report_html(workdir: Path) -> str:
    """The report page of the fixed job, as ``ckpt report`` writes it."""
    from airflow_checkpoint_provider.engine.catalog import MetadataStore
    from airflow_checkpoint_provider.engine.lifecycle.report import render_report

    url = f"sqlite:///{workdir / 'metadata.db'}"
    job_id = build_job(url)
    with MetadataStore(url) as store:
        out = render_report(store, job_id, workdir / "report.html")
    return out.read_text()


class _Structure(HTMLParser):
    TAGS = {"h1", "h2", "h3", "th", "caption"}

    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []
        self._open: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in self.TAGS:
            self._open, self._text = tag, []
        elif tag == "img" and "chart" in (a.get("class") or ""):
            self.items.append(f"img#{a.get('id')}")
        elif tag == "table":
            self.items.append(f"table#{a.get('id') or ''}")

    def handle_data(self, data: str) -> None:
        if self._open:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == self._open:
            text = " ".join("".join(self._text).split())
            # the page's own data (job id, times) is not structure
            self.items.append(f"{tag}:{text if tag != 'h1' else text.split(' of job')[0]}")
            self._open = None


def structure(html: str) -> str:
    """The report's structure: headings, table headers and charts, one per line."""
    parser = _Structure()
    parser.feed(html)
    return "\n".join(parser.items)


def fingerprint(html: str) -> str:
    return hashlib.sha256(structure(html).encode()).hexdigest()[:16]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def with_text(png: bytes, key: str, value: str) -> bytes:
    """``png`` with a ``tEXt`` chunk ``key=value`` after its header chunk."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    end_of_ihdr = 8 + 8 + struct.unpack(">I", png[8:12])[0] + 4
    return (
        png[:end_of_ihdr] + _chunk(b"tEXt", f"{key}\0{value}".encode("latin-1")) + png[end_of_ihdr:]
    )


def text_chunks(png: bytes) -> dict[str, str]:
    out, at = {}, 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"tEXt":
            key, _, value = data.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return out


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def render(out: Path = PICTURE) -> Path:
    browser = chromium()
    if browser is None:
        raise SystemExit("chromium is needed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        html = report_html(work)
        shot = work / "shot.png"
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={work / 'profile'}",
                f"--window-size={WIDTH},{HEIGHT}",
                f"--screenshot={shot}",
                (work / "report.html").as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        out.write_bytes(with_text(shot.read_bytes(), KEY, fingerprint(html)))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(render())
