"""mkdocs hooks of the documentation site (mkdocs.yml ``hooks:``).

A draft a helper writes in ``docs/changes/`` is built (so its links are checked) but is
in no navigation section; here it is also kept out of the search index, so a reader never
lands on development notes from the search box. Contributor material proper lives in
``contributing/`` of the repository, outside the site."""

from __future__ import annotations

from typing import Any

#: pages under these folders of docs/ are not indexed for search
NOT_SEARCHED = ("changes/",)


def on_page_markdown(markdown: str, *, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri.startswith(NOT_SEARCHED):
        page.meta["search"] = {**(page.meta.get("search") or {}), "exclude": True}
    return markdown
