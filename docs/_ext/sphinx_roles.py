"""Griffe extension for the documentation site: the package's Sphinx conventions in mkdocstrings.

Run by mkdocstrings (``mkdocs.yml``) once the package is loaded; the source is not changed.

* Sphinx roles (``:class:`~dpgp_gpflow.contract.PrivateModel```, ``:func:`release```,
  ``:mod:`dpgp_gpflow.pipeline```) become *optional* autorefs links: a link when the target is
  rendered on an API page, plain code otherwise. Names griffe cannot resolve at all (misspelt or
  stale targets) are logged at INFO level; ``python docs/_ext/sphinx_roles.py`` lists them.
* ``docs/<page>.md#<anchor>`` references become links to that page of the site. A reference to a
  page or heading that does not exist is logged as a WARNING, which fails ``mkdocs build --strict``
  (docstrings cite these anchors, so renaming a heading must not break them silently).
* Sphinx ``#:`` attribute comments (before the attribute or trailing on its line) become the
  attribute's docstring.
* A reST literal-block marker (``... cdf)::``) becomes a plain colon.
"""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

import griffe

#: griffe's logger: mkdocstrings routes it into MkDocs' logging, so a WARNING fails a --strict build
_log = griffe.logger

ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|attr|data|obj|exc|const):`(~?)([\w.]+)(\(\))?`")
#: reST literal-block marker at the end of a paragraph ("... cdf)::") becomes a plain colon.
LITERAL_MARKER = re.compile(r"(\S)::\n")

DOCS_REF = re.compile(r"(``)?docs/(\w+)\.md(#[\w-]+)?(``)?")

DOCS_DIR = Path(__file__).resolve().parents[1]

#: targets that failed to resolve: (object path, role text)
UNRESOLVED: List[Tuple[str, str]] = []
#: ``docs/`` references to a missing page or heading: (object path, reference)
BROKEN_DOCS: List[Tuple[str, str]] = []


def _slugify(title: str) -> str:
    """Python-Markdown's ``toc`` slug (the default ``mkdocs`` uses), as GitHub's for these headings."""
    from markdown.extensions.toc import slugify

    return slugify(title, "-")


@functools.lru_cache(maxsize=1)
def _docs_anchors() -> Dict[str, Set[str]]:
    """``{page: {anchor, ...}}`` for every Markdown page directly in ``docs/``."""
    anchors: Dict[str, Set[str]] = {}
    for page in DOCS_DIR.glob("*.md"):
        fenced = False
        found: Set[str] = set()
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
                found.add(_slugify(m.group(1)))
        anchors[page.stem] = found
    return anchors


def _lookup(root: griffe.Module, path: str) -> Optional[griffe.Object]:
    """The object at ``path`` (a dotted path inside ``root``'s package), or None."""
    if path == root.path:
        return root
    if not path.startswith(root.path + "."):
        return None
    try:
        return root[path[len(root.path) + 1:]]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _inherited(scope: griffe.Object, name: str) -> Optional[str]:
    """The path of ``name`` inherited by the class ``scope`` from a base in the package, or None."""
    if not scope.is_class:
        return None
    try:
        member = scope.all_members.get(name)
        return None if member is None else (member.target_path if member.is_alias else member.path)
    except Exception:  # noqa: BLE001 - bases outside the package, unresolvable aliases
        return None


def _resolve(obj: griffe.Object, root: griffe.Module, target: str) -> Optional[str]:
    """The full path ``target`` names in the scope of ``obj`` (None when it names nothing)."""
    target = target.lstrip(".")
    if target.startswith(root.path + ".") or target == root.path:
        return target if _lookup(root, target) is not None else None
    head, _, rest = target.partition(".")
    scope: Optional[griffe.Object] = obj
    while scope is not None:
        try:
            full = scope.resolve(head)
        except (griffe.NameResolutionError, griffe.AliasResolutionError, griffe.CyclicAliasError, KeyError):
            full = _inherited(scope, head)
        if full is not None:
            full = f"{full}.{rest}" if rest else full
            if not full.startswith(root.path):
                return full  # an external name (numpy, tensorflow, gpflow): plain code
            return full if _lookup(root, full) is not None else None
        scope = scope.parent
    return None


def _rewrite(obj: griffe.Object, root: griffe.Module, text: str) -> str:
    def replace(match: re.Match) -> str:
        role, tilde, target, call = match.groups()
        title = (target.rsplit(".", 1)[-1] if tilde else target.lstrip(".")) + (call or "")
        full = _resolve(obj, root, target)
        code = f"<code>{html.escape(title)}</code>"
        if full is None:
            UNRESOLVED.append((obj.path, match.group(0)))
            _log.info("sphinx_roles: %s: cannot resolve %s", obj.path, match.group(0))
            return code
        if not full.startswith(root.path):
            return code
        return f'<autoref identifier="{html.escape(full)}" optional>{code}</autoref>'

    def replace_docs(match: re.Match) -> str:
        open_, page, anchor, close = match.groups()
        text_ = f"docs/{page}.md{anchor or ''}"
        if page not in anchors or (anchor and anchor[1:] not in anchors[page]):
            BROKEN_DOCS.append((obj.path, text_))
            _log.warning("sphinx_roles: %s: docstring cites %s, which is not a page or heading of docs/", obj.path,
                         text_)
            return match.group(0)
        # API pages are rendered at api/<name>/ (use_directory_urls), the maths pages at <page>/
        href = f"../../{'' if page == 'index' else page + '/'}{anchor or ''}"
        label = f"<code>{html.escape(text_)}</code>" if open_ and close else html.escape(text_)
        return f'<a href="{href}">{label}</a>'

    anchors = _docs_anchors()
    text = ROLE.sub(replace, text)
    text = DOCS_REF.sub(replace_docs, text)
    return LITERAL_MARKER.sub(r"\1:\n", text)


def _comment_docstring(obj: griffe.Object) -> Optional[str]:
    """The Sphinx ``#:`` comment of an attribute: trailing on its first line, or the lines just before."""
    try:
        lines = obj.module.lines
    except Exception:  # noqa: BLE001 - no source: nothing to read
        return None
    if not obj.lineno or obj.lineno > len(lines):
        return None
    first = lines[obj.lineno - 1]
    if "#:" in first:
        return first.split("#:", 1)[1].strip() or None
    above: List[str] = []
    i = obj.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        above.insert(0, lines[i].strip()[2:].strip())
        i -= 1
    return "\n".join(above) or None


def _walk(obj: griffe.Object, root: griffe.Module, seen: set) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is None and obj.is_attribute:
        comment = _comment_docstring(obj)
        if comment:
            obj.docstring = griffe.Docstring(comment, lineno=obj.lineno, endlineno=obj.lineno, parent=obj)
    if obj.docstring is not None:
        obj.docstring.value = _rewrite(obj, root, obj.docstring.value)
    for member in obj.members.values():
        if member.is_alias:
            continue
        _walk(member, root, seen)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _docs_anchors.cache_clear()  # `mkdocs serve` rebuilds: read the headings afresh
        _walk(pkg, pkg, set())


if __name__ == "__main__":  # list the roles that do not resolve
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    loader = griffe.GriffeLoader(search_paths=[str(root)], extensions=griffe.load_extensions(SphinxRoles))
    loader.load(sys.argv[1] if len(sys.argv) > 1 else "dpgp_gpflow")
    loader.resolve_aliases(implicit=True, external=False)
    for where, role in UNRESOLVED:
        print(f"unresolved role  {where}: {role}")
    for where, ref in BROKEN_DOCS:
        print(f"broken docs ref  {where}: {ref}")
    print(f"{len(UNRESOLVED)} unresolved roles, {len(BROKEN_DOCS)} broken docs/ references")
