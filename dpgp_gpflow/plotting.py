"""Matplotlib helpers for 1-D releases: draw on an ``Axes`` you made, never call ``plt.show``.

    fig, ax = plt.subplots()
    plot_release(ax, Xnew, release)

Everything a :class:`~dpgp_gpflow.PrivateRelease` holds is public, so :func:`plot_release` and
:func:`plot_noise_std` on their own draw only publishable things. The optional ``nondp_mean``,
``X`` and ``Y`` arguments are not: the non-DP posterior mean and the training outputs are private,
and a figure that shows them is for the data owner's eyes only (comparison, debugging), never for
publication.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from .released import PrivateRelease

__all__ = ["plot_noise_std", "plot_release"]


def _inputs_1d(Xnew: Any, k: Optional[int] = None) -> np.ndarray:
    """``Xnew`` ([k] or [k, 1]) as a 1-D float array; refuses inputs of more than one dimension."""
    x = np.asarray(Xnew, dtype=np.float64)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise ValueError(f"Xnew must have shape [k] or [k, 1] (1-D inputs) to be plotted, got shape {x.shape}")
    if k is not None and x.shape[0] != k:
        raise ValueError(f"Xnew has {x.shape[0]} points but the release has {k} values")
    return x


def _one_output(release: PrivateRelease, name: str) -> np.ndarray:
    """The release's ``name`` array ([k, 1]) as a 1-D array [k]; ``ValueError`` for a release of several outputs."""
    values = np.asarray(getattr(release, name), dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != 1:
        raise ValueError(f"only a release of one output can be plotted, this one's {name} is {list(values.shape)} "
                         "(plot each output's column on its own axes)")
    return values[:, 0]


def plot_release(
    ax: Any,
    Xnew: Any,
    release: PrivateRelease,
    *,
    nondp_mean: Any = None,
    X: Any = None,
    Y: Any = None,
    color: str = "C0",
    label: str = "DP mean",
) -> Any:
    """Draw a 1-D release on ``ax``: the DP mean and two bands around it; returns ``ax``.

    - solid line: the released (DP) mean;
    - dark band: ``+-2 sqrt(variance)``, the public GP posterior uncertainty (no DP noise);
    - light band: ``+-2 sqrt(variance + noise_std**2)``, the uncertainty a user of the release
      should quote (posterior plus DP noise).

    Optional, **owner only** (private, never publish a figure that shows them): ``nondp_mean``
    ([k] or [k, 1]), the non-private posterior mean at ``Xnew``, drawn dashed; ``X``, ``Y``, the
    training data, drawn as dots.
    """
    x = _inputs_1d(Xnew, release.mean.shape[0])
    order = np.argsort(x, kind="stable")
    x = x[order]
    mean = _one_output(release, "mean")[order]
    post_sd = np.sqrt(np.maximum(_one_output(release, "variance")[order], 0.0))
    total_sd = np.sqrt(np.maximum(_one_output(release, "total_variance")[order], 0.0))

    if X is not None and Y is not None:
        ax.plot(_inputs_1d(X), np.reshape(np.asarray(Y, dtype=np.float64), [-1]), ".",
                color="0.45", markersize=3, alpha=0.6, label="training data (private)")
    ax.fill_between(x, mean - 2 * total_sd, mean + 2 * total_sd, color=color, alpha=0.15,
                    linewidth=0, label=r"$\pm 2$ sd, posterior + DP noise")
    ax.fill_between(x, mean - 2 * post_sd, mean + 2 * post_sd, color=color, alpha=0.35,
                    linewidth=0, label=r"$\pm 2$ sd, posterior (public)")
    if nondp_mean is not None:
        nondp = np.reshape(np.asarray(nondp_mean, dtype=np.float64), [-1])
        if nondp.shape[0] != x.shape[0]:
            raise ValueError(f"nondp_mean has {nondp.shape[0]} values but the release has {x.shape[0]}")
        ax.plot(x, nondp[order], "--", color="k", linewidth=1.2, label="non-DP mean (private)")
    ax.plot(x, mean, "-", color=color, linewidth=1.8, label=label)
    return ax


def plot_noise_std(ax: Any, Xnew: Any, releases: Mapping[str, PrivateRelease], *, log: bool = True) -> Any:
    """Draw the DP noise standard deviation against the input, one line per release; returns ``ax``.

    ``releases`` maps a legend label to a release of one output made at ``Xnew`` ([k] or [k, 1]). ``log=True``
    (default) uses a log y axis: the standard mechanism's noise is often orders of magnitude larger.
    Public: the noise std does not depend on the private outputs.
    """
    x = _inputs_1d(Xnew)
    order = np.argsort(x, kind="stable")
    for i, (label, release) in enumerate(releases.items()):
        _inputs_1d(Xnew, release.noise_std.shape[0])
        ax.plot(x[order], _one_output(release, "noise_std")[order], color=f"C{i}", linewidth=1.6, label=label)
    if log:
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 20, not 2 x 10^1
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
    ax.set_ylabel("DP noise std")
    return ax
