"""The Python API reference renders cross-references, not Sphinx roles, and titles the
engine's classes by their public import paths (issue 56 item 2).

The docstrings use Sphinx roles (``:class:`~.eventtime.WatermarkStrategy```); the griffe
extension tools/docs/sphinx_roles.py turns them into autorefs cross-references when the
site is built. Here: the extension on a small package, then the built site's API page."""

from __future__ import annotations

import re
from pathlib import Path

import griffe
import pytest
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
EXTENSION = ROOT / "tools" / "docs" / "sphinx_roles.py"
RAW_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):(?:`|<code>|&#96;)"
)
PRE = re.compile(r"<pre\b.*?</pre>", re.S)


def _load(tmp_path: Path, files: dict[str, str]) -> griffe.Module:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    extensions = griffe.load_extensions(f"{EXTENSION}:SphinxRoles")
    return griffe.load("pkg", search_paths=[tmp_path], extensions=extensions)


def test_roles_become_optional_autorefs_to_the_named_object(tmp_path):
    pkg = _load(
        tmp_path,
        {
            "__init__.py": "",
            "eventtime.py": 'class WatermarkStrategy:\n    """Watermarks."""\n',
            "api.py": (
                "class Pipeline:\n"
                '    """Uses :class:`~.eventtime.WatermarkStrategy`, :meth:`run`,\n'
                "    :class:`the strategy <pkg.eventtime.WatermarkStrategy>`,\n"
                '    :mod:`pkg.eventtime` and :class:`pyarrow.Table`."""\n'
                "    def run(self):\n"
                '        """Run."""\n'
            ),
        },
    )
    doc = pkg["api.Pipeline"].docstring.value
    assert not RAW_ROLE.search(doc), doc
    ref = '<autoref identifier="{}" optional><code>{}</code></autoref>'
    assert ref.format("pkg.eventtime.WatermarkStrategy", "WatermarkStrategy") in doc
    assert ref.format("pkg.api.Pipeline.run", "run()") in doc
    assert ref.format("pkg.eventtime.WatermarkStrategy", "the strategy") in doc
    assert ref.format("pkg.eventtime", "pkg.eventtime") in doc
    # outside the package: plain code, no reference that could not resolve
    assert "<code>pyarrow.Table</code>" in doc
    assert "pyarrow.Table</code></autoref>" not in doc


@pytest.mark.timeout(600)
def test_the_api_page_renders_no_raw_sphinx_role(built_site):
    site = built_site
    pages = [site / "reference" / "api" / "index.html", *(site / "airflow").rglob("*.html")]
    assert pages[0].exists()
    for page in pages:
        text = PRE.sub("", page.read_text())  # code listings may quote a docstring
        raw = RAW_ROLE.findall(text)
        assert not raw, f"{page.relative_to(site)}: {len(raw)} raw Sphinx roles, e.g. {raw[:3]}"
        assert "&lt;autoref" not in text, f"{page.relative_to(site)}: a cross-reference was escaped"
    api = pages[0].read_text()
    assert 'class="autorefs autorefs-internal"' in api, "the roles became links"


@pytest.mark.timeout(600)
def test_engine_classes_are_titled_by_their_public_import_path(built_site):
    site = built_site
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in ("Pipeline", "CheckpointConfig", "RestartStrategy", "WatermarkStrategy"):
        assert f'<h2 id="airflow_checkpoint_provider.engine.{name}"' in api, name
    internal = re.findall(
        r'<h2 id="(airflow_checkpoint_provider\.engine\.(?:datastream|plan|config|eventtime)\.[^"]+)"',
        api,
    )
    assert not internal, f"titled by an internal module path: {internal}"
