"""Progress on long work: a tqdm bar on stderr."""

from __future__ import annotations

import sys
from typing import Optional

from tqdm.auto import tqdm

__all__: list[str] = []  # internal: the package imports these names by name


class Progress:
    """A progress bar over ``total`` steps on stderr; silent when ``enabled`` is false."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self._bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False) if enabled else None

    def update(self, desc: Optional[str] = None) -> None:
        """One step done; ``desc`` names the step that starts now."""
        if self._bar is not None:
            if desc is not None:
                self._bar.set_description_str(desc)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
