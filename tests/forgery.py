"""Consistent forgeries of release files for the tests: a saved file edited and its hash recomputed as
the format does, so that only the loader's own checks (never the hash) can refuse it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from dpgp_gpflow.io import format as release_file


def forged(source: Path, tmp_path: Path, edit: Callable[[Any], None]) -> Path:
    """``source`` edited by ``edit(raw)`` and its hash recomputed: a consistent file at ``tmp_path``."""
    raw = json.loads(Path(source).read_text())
    edit(raw)
    raw["sha256"] = release_file.document_sha256(raw)
    path = Path(tmp_path) / "forged.json"
    path.write_text(json.dumps(raw, indent=1))
    return path
