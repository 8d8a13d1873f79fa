"""MkDocs hook: MathJax 3 served from the built site itself, so the maths renders offline.

The JavaScript is not kept in this repository: it comes from the ``django-static-mathjax`` package
on PyPI (a copy of MathJax 3.2.2's ``es5`` build, no dependencies; installed by the ``docs`` and
``dev`` extras), whose files this hook adds to the site under ``assets/mathjax/``. ``mkdocs.yml``
loads ``assets/mathjax/tex-mml-chtml.js`` through ``extra_javascript``, which MkDocs writes into
every page as a path relative to that page; ``docs/javascripts/mathjax.js`` (loaded before it) is
the MathJax 3 configuration for ``pymdownx.arithmatex`` with ``generic: true``.

Besides the combined TeX/MathML -> CommonHTML component, the files it loads on demand are copied:
the CommonHTML fonts (``output/chtml/fonts``, found relative to the script), the TeX extensions
``autoload`` fetches (``input/tex/extensions``) and the menu's accessibility modules (``ui``,
``a11y``, ``sre``). Nothing is fetched from the network, at build time or by the reader's browser.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

#: where the MathJax files go in the built site (``extra_javascript`` in mkdocs.yml names the entry)
SITE_DIR = "assets/mathjax"
#: the component the pages load: TeX and MathML input, CommonHTML output, the menu, autoload
ENTRY = "tex-mml-chtml.js"
#: folders of the es5 build that ENTRY loads on demand, relative to itself
ON_DEMAND = ("output/chtml/fonts/woff-v2", "input/tex/extensions", "ui", "a11y", "sre")


def mathjax_es5() -> Path:
    """The installed MathJax 3 ``es5`` folder (django-static-mathjax), or a one-line PluginError."""
    hint = 'MathJax for the docs is missing: pip install -e ".[docs]" (it installs django-static-mathjax)'
    try:
        spec = importlib.util.find_spec("mathjax")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise PluginError(hint)
    for location in spec.submodule_search_locations:
        es5 = Path(location) / "static" / "mathjax" / "es5"
        if (es5 / ENTRY).is_file():
            return es5
    raise PluginError(f"{hint}; no static/mathjax/es5/{ENTRY} under {list(spec.submodule_search_locations)}")


def bundled_files(es5: Path) -> list[Path]:
    """ENTRY and every file under ON_DEMAND, sorted."""
    found = [es5 / ENTRY]
    for folder in ON_DEMAND:
        found.extend(sorted(p for p in (es5 / folder).rglob("*") if p.is_file()))
    return found


def on_files(files: Files, config: MkDocsConfig) -> Files:
    es5 = mathjax_es5()
    for path in bundled_files(es5):
        uri = f"{SITE_DIR}/{path.relative_to(es5).as_posix()}"
        if files.get_file_from_path(uri) is None:  # a file of the same name in docs/ wins
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
