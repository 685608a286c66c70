"""A griffe extension for the API reference: Sphinx cross-reference roles become links.

The docstrings use Sphinx roles (``:class:`~.eventtime.WatermarkStrategy```,
``:meth:`Pipeline.run```, ``:mod:`airflow_checkpoint_provider.engine.client```), which
mkdocstrings' Sphinx docstring parser leaves as raw text. After griffe has loaded the
package, this extension rewrites every role of every docstring into an autorefs
cross-reference to the object it names, found the way Sphinx finds it:

* ``~`` shows only the last component (``WatermarkStrategy``), ``Title <target>`` shows
  the title, otherwise the target as written; functions and methods get ``()``;
* a target is looked up as a full path, then relative to the documented object, its class
  and its module, then as the dotted suffix of an object of the package (a leading ``.``,
  as in ``~.eventtime.WatermarkStrategy``, means exactly that search);
* the reference is *optional*: it is a link where the site renders the object, and plain
  code (with the full path as its tooltip) where it does not, so an internal class named in
  a docstring never breaks the strict build. A target outside the package (``pyarrow.Table``)
  is plain code.

The docstrings themselves are not edited (other work changes those files); the rewrite
happens on griffe's loaded copy, each time the site is built. tests/integration/docs/test_api_reference.py
fails when a role reaches the built page.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|attr|mod|data|exc|obj|const|type|any)"
    r":`(?P<body>[^`]+)`"
)
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$")
CALLABLE_ROLES = {"func", "meth"}


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if member.is_alias:
            continue
        yield from _walk(member)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrite ``:role:`target``` in the docstrings of a loaded package (see the module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        objects = list(_walk(pkg))
        paths = {o.path for o in objects}
        by_suffix: dict[str, list[str]] = defaultdict(list)
        for path in paths:
            parts = path.split(".")
            for i in range(1, len(parts)):
                by_suffix[".".join(parts[i:])].append(path)
        for obj in objects:
            if obj.docstring is None or ":`" not in obj.docstring.value:
                continue
            obj.docstring.value = ROLE.sub(
                lambda m, o=obj: self._reference(m, o, paths, by_suffix),  # type: ignore[misc]
                obj.docstring.value,
            )

    @staticmethod
    def _resolve(
        target: str, obj: griffe.Object, paths: set[str], by_suffix: dict[str, list[str]]
    ) -> str | None:
        if not target.startswith(".") and target in paths:
            return target
        name = target.lstrip(".")
        scopes = [obj, obj.parent, obj.module]
        if not target.startswith("."):
            for scope in scopes:
                if scope is not None and f"{scope.path}.{name}" in paths:
                    return f"{scope.path}.{name}"
        candidates = by_suffix.get(name, [])
        if not candidates:
            return None
        module = obj.module.path
        # the candidate nearest the documented object, then the shortest path
        return min(
            candidates, key=lambda p: (not p.startswith(module.rsplit(".", 1)[0]), len(p), p)
        )

    def _reference(
        self,
        m: re.Match[str],
        obj: griffe.Object,
        paths: set[str],
        by_suffix: dict[str, list[str]],
    ) -> str:
        body = m["body"].strip().lstrip("!")
        titled = TITLED.match(body)
        title, target = (titled["title"], titled["target"]) if titled else (None, body)
        short = target.startswith("~")
        target = target.lstrip("~").removesuffix("()")
        if title is None:
            title = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
            if m["role"] in CALLABLE_ROLES:
                title += "()"
        code = f"<code>{html.escape(title)}</code>"
        path = self._resolve(target, obj, paths, by_suffix)
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'
