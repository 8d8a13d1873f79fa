"""Progress on long work: tqdm where it is installed, else a one-line counter on stderr."""

from __future__ import annotations

import sys

try:
    from tqdm.auto import tqdm
except ImportError:  # tqdm is optional
    tqdm = None

__all__ = ["Progress"]


class Progress:
    """A progress bar over ``total`` steps; silent when ``enabled`` is false."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self._enabled = bool(enabled)
        self._total, self._count, self._desc = total, 0, desc
        self._bar = tqdm(total=total, desc=desc) if (self._enabled and tqdm is not None) else None

    def update(self) -> None:
        self._count += 1
        if not self._enabled:
            return
        if self._bar is not None:
            self._bar.update(1)
        else:
            sys.stderr.write(f"\r{self._desc}: {self._count}/{self._total}")
            if self._count == self._total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
