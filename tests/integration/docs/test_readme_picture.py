"""The README's picture (docs/report.png) is the checkpoint report as the code renders it
today (issue 56 item 5).

tools/docs/readme_picture.py renders the report of a fixed job with headless Chromium and
stamps the PNG with the fingerprint of the page's structure (headings, table headers,
charts). Here the report of the same job is rendered again: a changed report (a section
added, a column renamed, a chart removed) changes the fingerprint, and the test says how to
render the picture again."""

from __future__ import annotations

import importlib.util
import re
import struct

import pytest
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
TOOL = ROOT / "tools" / "docs" / "readme_picture.py"
_spec = importlib.util.spec_from_file_location("readme_picture", TOOL)
assert _spec is not None and _spec.loader is not None
picture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(picture)


def test_the_readme_shows_the_picture():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"!\[[^\]]+\]\(docs/report\.png\)", readme), "README shows docs/report.png"


def test_the_picture_shows_the_report_the_code_renders_today(tmp_path):
    stamped = picture.text_chunks(picture.PICTURE.read_bytes()).get(picture.KEY)
    assert stamped, f"{picture.PICTURE} has no {picture.KEY} stamp: render it with the tool"
    html = picture.report_html(tmp_path)
    assert stamped == picture.fingerprint(html), (
        "the checkpoint report changed since docs/report.png was rendered; render it again: "
        f"make docs-picture (python {TOOL.relative_to(ROOT)})\n--- the report's structure today\n"
        + picture.structure(html)
    )


def test_the_fingerprint_changes_with_the_structure_not_with_the_data():
    page = (
        "<h1>Checkpoints of job {}</h1><p>generated {}</p><h2>Summary</h2>"
        '<table id="t"><tr><th>Completed</th></tr><tr><td>{}</td></tr></table>'
        '<img class="chart" id="chart-duration" src="data:...">'
    )
    base = picture.fingerprint(page.format("orders", "today", 3))
    assert picture.fingerprint(page.format("payments", "tomorrow", 7)) == base
    assert picture.fingerprint(page.replace("Summary", "Totals")) != base
    assert picture.fingerprint(page.replace("Completed", "Done")) != base
    assert (
        picture.fingerprint(
            page.replace('<img class="chart" id="chart-duration" src="data:...">', "")
        )
        != base
    )


def test_the_stamp_is_a_valid_png_chunk():
    png = picture.PICTURE.read_bytes()
    stamped = picture.with_text(png, "k", "v")
    assert picture.text_chunks(stamped)["k"] == "v"
    at = 8
    while at < len(stamped):  # every chunk's CRC is right
        (length,) = struct.unpack(">I", stamped[at : at + 4])
        body = stamped[at + 4 : at + 8 + length]
        (crc,) = struct.unpack(">I", stamped[at + 8 + length : at + 12 + length])
        assert crc == picture.zlib.crc32(body), body[:4]
        at += 12 + length


@pytest.mark.timeout(300)
@pytest.mark.skipif(
    picture.chromium() is None, reason="chromium not installed (make check-chromium)"
)
def test_the_tool_renders_the_picture(tmp_path):
    out = picture.render(tmp_path / "report.png")
    png = out.read_bytes()
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (picture.WIDTH, picture.HEIGHT)
    assert (
        picture.text_chunks(png)[picture.KEY]
        == picture.text_chunks(picture.PICTURE.read_bytes())[picture.KEY]
    )
