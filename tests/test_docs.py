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
from pathlib import Path

import pytest

import dpgp_gpflow as dp

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
#: pages whose ```python blocks are run, each page's blocks in order in one namespace
EXAMPLE_PAGES = ["index.md", "getting_started.md", *sorted(f"guides/{p.name}" for p in (DOCS / "guides").glob("*.md"))]


def _missing_doc_tools() -> list[str]:
    missing = []
    for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
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
    for page in ["getting_started", "privacy_model", "mechanisms", "selection", "composition", "baselines",
                 "corrections", "guides/regression", "guides/sparse", "guides/classification",
                 "guides/selection", "guides/accounting", "guides/your_own_model", "guides/publishing",
                 "exact_sampling", "release_file", "api/publishing", "api/ledger", "api/contract",
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


@pytest.mark.parametrize("page", EXAMPLE_PAGES)
def test_examples_run(page):
    blocks = re.findall(r"^```python\n(.*?)^```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S | re.M)
    assert blocks, f"{page} has no Python example"
    namespace = {"__name__": f"docs_example_{Path(page).stem}"}
    with warnings.catch_warnings():
        for category in (dp.ClippingWarning, dp.ReproducibleNoiseWarning, dp.PrivacyLeakWarning):
            warnings.simplefilter("error", category)  # an example must not clip, seed or leak
        for i, code in enumerate(blocks):
            exec(compile(code, f"docs/{page} (block {i + 1})", "exec"), namespace)  # noqa: S102
