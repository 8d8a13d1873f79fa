"""The documentation site: it builds with ``mkdocs build --strict`` (no broken link, anchor or
cross-reference, no page left out of the nav), the API pages are generated from the docstrings,
and every Python example in the home page, getting-started page and guides runs against today's code."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import warnings
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import dpgp_gpflow as dp

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
#: pages whose ```python blocks are run, each page's blocks in order in one namespace
EXAMPLE_PAGES = ["index.md", "getting_started.md", *sorted(f"guides/{p.name}" for p in (DOCS / "guides").glob("*.md"))]


def _missing_doc_tools() -> list[str]:
    missing = []
    # "mathjax": django-static-mathjax, whose MathJax 3 the site serves itself (docs/_ext/mathjax_offline.py)
    for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mathjax"):
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # its parent package is absent
            found = False
        if not found:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = _missing_doc_tools()
    if missing:
        pytest.skip(f"documentation tools not installed ({', '.join(missing)}): pip install -e \".[dev]\"")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def _text(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text(encoding="utf-8")


def test_site_builds_strict_with_every_page(site):
    for page in ["getting_started", "overview", "development", "privacy_model", "mechanisms", "selection", "composition", "baselines",
                 "corrections", "guides/regression", "guides/sparse", "guides/classification",
                 "guides/selection", "guides/accounting", "guides/your_own_model", "guides/publishing",
                 "exact_sampling", "release_file", "api/io", "api/ledger", "api/contract",
                 "api/pipeline", "api/models", "api/released"]:
        assert (site / page / "index.html").is_file(), page
    assert (site / "index.html").is_file()


def test_api_pages_are_generated_from_the_docstrings(site):
    contract = _text(site, "api/contract")
    assert 'id="dpgp_gpflow.contract.PrivateModel"' in contract
    assert 'id="dpgp_gpflow.contract.FactoredPrivateModel"' in contract
    pipeline = _text(site, "api/pipeline")
    assert 'id="dpgp_gpflow.pipeline.release_function"' in pipeline and "release_function" in pipeline
    assert 'id="dpgp_gpflow.models.DPGPR"' in _text(site, "api/models")
    assert 'id="dpgp_gpflow.released.PrivateRelease"' in _text(site, "api/released")
    # Sphinx roles in the docstrings became links (docs/_ext/sphinx_roles.py), not raw ":class:" text
    for page in (site / "api").glob("*/index.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r":(class|func|meth|mod|data|attr):<code>", text), page.parent.name
    assert 'href="../../mechanisms/#the-private-linear-release"' in contract  # docs/ anchors cited in docstrings


class _Resources(HTMLParser):
    """The script sources and stylesheet links of one page, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.stylesheets: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        if tag == "link" and "stylesheet" in (a.get("rel") or "").split() and a.get("href"):
            self.stylesheets.append(a["href"])


def _resources(page: Path) -> _Resources:
    parser = _Resources()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_no_page_loads_a_script_or_stylesheet_from_the_network(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 40
    for page in pages:
        found = _resources(page)
        for url in found.scripts + found.stylesheets:
            parts = urlsplit(url)
            assert not parts.scheme and not parts.netloc, f"{page.relative_to(site)} loads {url}"


def test_maths_renders_from_the_sites_own_mathjax(site):
    """Every page with maths loads the MathJax configuration, then MathJax 3 itself, by paths relative to the
    page that exist in the built site (copied by docs/_ext/mathjax_offline.py from django-static-mathjax)."""
    with_maths = [p for p in sorted(site.rglob("index.html")) if 'class="arithmatex"' in p.read_text(encoding="utf-8")]
    assert {"index.html", "mechanisms/index.html", "selection/index.html"} <= {
        p.relative_to(site).as_posix() for p in with_maths}
    bundles = set()
    for page in with_maths:
        scripts = _resources(page).scripts
        entry = [s for s in scripts if s.endswith("/tex-mml-chtml.js")]
        config = [s for s in scripts if s.endswith("javascripts/mathjax.js")]
        assert len(entry) == 1 and len(config) == 1, (page, scripts)
        assert scripts.index(config[0]) < scripts.index(entry[0]), "the configuration must load before MathJax"
        for src in (entry[0], config[0]):
            assert not src.startswith("/") and not urlsplit(src).scheme, (page, src)
            assert (page.parent / src).resolve().is_file(), (page, src)
        bundles.add((page.parent / entry[0]).resolve())
    assert len(bundles) == 1
    bundle = bundles.pop()
    text = bundle.read_text(encoding="utf-8")
    # MathJax 3 (window.MathJax = {tex: ..., options: ...} is a version-3 configuration; version 2 reads MathJax.Hub)
    assert 'VERSION="3.' in text
    # the CommonHTML fonts and autoloaded TeX extensions it fetches relative to itself are there too
    assert '"output/chtml/fonts/woff-v2"' in text
    assert (bundle.parent / "output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff").is_file()
    assert (bundle.parent / "input/tex/extensions/cancel.js").is_file()
    # the configuration looks for what pymdownx.arithmatex (generic) writes: \(...\) and \[...\] in class arithmatex
    config = (site / "javascripts" / "mathjax.js").read_text(encoding="utf-8")
    assert 'inlineMath: [["\\\\(", "\\\\)"]]' in config and 'displayMath: [["\\\\[", "\\\\]"]]' in config
    assert 'processHtmlClass: "arithmatex"' in config and "MathJax.Hub" not in config
    mechanisms = _text(site, "mechanisms")
    assert re.search(r'<span class="arithmatex">\\\(.+?\\\)</span>', mechanisms)
    assert re.search(r'<div class="arithmatex">\\\[.+?\\\]</div>', mechanisms, flags=re.S)


def _run_python_blocks(path: Path) -> None:
    """Run a page's ```python blocks in order in one namespace; an example must not clip, seed or leak."""
    blocks = re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    label = path.relative_to(REPO_ROOT).as_posix()
    assert blocks, f"{label} has no Python example"
    namespace = {"__name__": f"docs_example_{path.stem}"}
    with warnings.catch_warnings():
        for category in (dp.ClippingWarning, dp.ReproducibleNoiseWarning, dp.PrivacyLeakWarning):
            warnings.simplefilter("error", category)
        for i, code in enumerate(blocks):
            exec(compile(code, f"{label} (block {i + 1})", "exec"), namespace)  # noqa: S102


@pytest.mark.parametrize("page", EXAMPLE_PAGES)
def test_examples_run(page):
    _run_python_blocks(DOCS / page)


# ---------------------------------------------------------------------------------------------
# The README: what a newcomer needs (what it is, install, a first example, the command line, the
# guarantee, links); everything else lives in the docs (overview.md, development.md, the guides).

README = REPO_ROOT / "README.md"


def test_readme_first_example_runs():
    _run_python_blocks(README)


def test_readme_is_short_and_keeps_the_commands_ci_runs():
    text = README.read_text(encoding="utf-8")
    assert len(text) < 6500, f"README is {len(text)} characters: move detail to the docs"
    # .ci/run runs "the README's install command" and "the README's test command": the same ones
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    install = re.search(r"^pip install -e \S+$", ci, flags=re.M).group(0)
    assert f"```bash\n{install}\npytest\n```" in text
    assert re.search(r"^pytest$", ci, flags=re.M)
    for name in ("docs/DESIGN_MAP.md", "benchmarks/RESULTS.md", "docs/index.md", "docs/privacy_model.md"):
        assert f"]({name}" in text, name


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc (and GitHub) gives a plain heading."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", text) if not urlsplit(link).scheme]
    assert len(links) > 15
    for link in links:
        target, _, anchor = link.partition("#")
        path = REPO_ROOT / target
        assert path.exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, link


def test_every_docs_page_is_linked_from_the_home_page():
    """Nothing cut from the README is stranded: each top-level page (and each guide) is linked from index.md."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    pages = [p.relative_to(DOCS).as_posix() for p in [*DOCS.glob("*.md"), *(DOCS / "guides").glob("*.md")]]
    assert "overview.md" in pages and "development.md" in pages
    for page in pages:
        if page != "index.md":
            assert f"]({page}" in index, page
