"""``dpgp show``: a release file's privacy card and a full release's values, checked without TensorFlow
(:mod:`dpgp_gpflow.io.card`).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from .common import SHOW_ROWS, STORED_INPUT_VALUES, UsageError, output_names

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


def _card_lines(card: dict, indent: str = "  ") -> List[str]:
    """The privacy card as indented ``key: value`` lines (nested releases and dicts indented further)."""
    lines = []
    for key, value in card.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines += _card_lines(value, indent + "  ")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                lines.append(f"{indent}{key} [{i + 1} of {len(value)}]:")
                lines += _card_lines(v, indent + "  ")
        else:
            lines.append(f"{indent}{key}: {value}")
    return lines


def _stored_inputs(card: dict, k: int) -> Tuple[Optional[np.ndarray], str]:
    """The inputs a release file stores in its card (``release_inputs``, written by ``dpgp release --at/--grid``)
    as a float64 [k, D] array checked against the card's ``inputs_hash``, or their first rows (with
    ``release_inputs_rows``: :data:`STORED_INPUT_VALUES`), and what to say of them; else ``None`` and why."""
    from ..io.format import inputs_hash

    stored = card.get("release_inputs")
    if stored is None:
        return None, "the file does not store the inputs (only their hash)"
    try:
        X = np.asarray(stored, dtype=np.float64)
    except (TypeError, ValueError):
        return None, "the stored inputs are not a table of numbers"
    rows = card.get("release_inputs_rows")
    if rows is not None:  # the first rows only: no hash to check them against
        if rows != k or X.ndim != 2 or X.shape[0] != min(k, SHOW_ROWS):
            return None, f"the stored inputs' shape {X.shape} (of {rows} rows) does not match the {k} values"
        return X, (f"the file stores the inputs of the first {X.shape[0]} only (more than {STORED_INPUT_VALUES} "
                   "numbers), not checked against inputs_hash")
    if X.ndim != 2 or X.shape[0] != k:
        return None, f"the stored inputs' shape {X.shape} does not match the {k} values"
    if card.get("inputs_hash") != inputs_hash(X):
        return None, "the stored inputs do not match the card's inputs_hash"
    return X, ""


def _values_table(arrays: dict, card: dict) -> List[str]:
    """A full release's values (its ``mean`` and ``noise_std`` arrays, [k] or [k, P]) and, when the file stores
    them, their inputs: at most :data:`SHOW_ROWS` rows, then how many more."""
    mean = np.asarray(arrays["mean"], dtype=np.float64)
    noise_std = np.asarray(arrays["noise_std"], dtype=np.float64)
    mean, noise_std = (a.reshape(a.shape[0], -1) for a in (mean, noise_std))  # [k, P]: P = 1 unless several --y
    k, outputs = mean.shape
    X, why = _stored_inputs(card, k)
    names: List[str] = []
    if X is not None:
        given = card.get("columns")
        names = ([str(c) for c in given] if isinstance(given, list) and len(given) == X.shape[1]
                 else [f"x{j + 1}" for j in range(X.shape[1])])
    if outputs == 1:
        header = [*names, "mean", "noise_std"]
    else:
        ys = output_names(card, outputs)
        header = [*names, *(f"mean_{c}" for c in ys), *(f"noise_std_{c}" for c in ys)]
    width = max(12, *(len(h) for h in header))
    lines = [f"released values ({k}{'; ' + why if why else ''}):",
             "  " + " ".join(f"{h:>{width}}" for h in header)]
    for i in range(min(k, SHOW_ROWS)):
        row = [*(X[i] if X is not None else ()), *mean[i], *noise_std[i]]
        lines.append("  " + " ".join(f"{v:>{width}.6g}" for v in row))
    if k > SHOW_ROWS:
        lines.append(f"  ... and {k - SHOW_ROWS} more row(s)")
    return lines


def _summary(checked) -> str:
    """One line of a checked release file (:class:`~dpgp_gpflow.io.card.CheckedCard`): its kind, total budget and
    last release, as the loaded object's repr shows them."""
    from ..io.card import WHOLE_ROWS_KINDS, whole_rows_summary

    if checked.kind in WHOLE_ROWS_KINDS:  # no PrivateRelease parts: its own line, from the card

        return whole_rows_summary(checked.card)
    card, last = checked.card, checked.releases[-1]
    mean = last.arrays["mean"]
    outputs = f", outputs={mean.shape[1]}" if mean.ndim == 2 else ""
    bounds = last["y_bounds"]
    return (f"{checked.kind}(mechanism={last['mechanism']!r}, epsilon={card['epsilon']:.6g}, delta={card['delta']:.6g}, "
            f"k={mean.shape[0]}{outputs}, r={last['rank']}, bounds={bounds}"
            + (f", releases={len(checked.releases)}" if len(checked.releases) > 1 else "")
            + (", clip_to_bounds=True" if card.get("clip_to_bounds") else "")
            + (", reproducible=True)" if card["reproducible"] else ")"))


def cmd_show(args) -> int:
    path = Path(args.release)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    from ..io.card import read_checked_card  # no TensorFlow: the card's checks, not the readout's

    try:
        checked = read_checked_card(path)
    except (ValueError, OSError) as exc:
        message = str(exc)  # the reader's own errors already name the file
        raise UsageError(message if message.startswith(str(path)) else f"{path}: {message}") from None
    card = checked.card
    print(f"{args.release}: {_summary(checked)}")
    shown = dict(card)
    if isinstance(shown.get("release_inputs"), list):  # printed in the table below, not as one long line
        rows = shown.pop("release_inputs_rows", None)
        shown["release_inputs"] = f"{len(shown['release_inputs'])}{'' if rows is None else f' of {rows}'} row(s) (below)"
    print("\n".join(_card_lines(shown)))
    if checked.kind == "PrivateRelease":
        print("\n".join(_values_table(checked.releases[0].arrays, card)))
    return 0
