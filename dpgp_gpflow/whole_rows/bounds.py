"""The public sensitivity formula of the whole-row statistics, without TensorFlow.

Everything :mod:`dpgp_gpflow.whole_rows.sensitivity` says about the bounds, the shares, the rounding slack and
the persons is computed here (that module re-exports these names and adds the packing of the released vector),
so that a release file's checks (:mod:`dpgp_gpflow.io.card`, run by ``dpgp show`` without TensorFlow) recompute a
whole-row release's sensitivity, noise std and shares with the very formula the release used.

Privacy assumption: public quantities only (the bounds' width, the shares, the shapes and the chunking).
"""

from __future__ import annotations

import math
from typing import Any, Dict, NamedTuple, Tuple

import numpy as np

from ..calibration import SENSITIVITY_SAFETY
from ..sampling import UNIT_ROUNDOFF, gaussian_grid_factor

__all__ = ["DEFAULT_SHARES"]


#: Squared shares ``(w_S^2, w_b^2, w_q^2)`` of the unit total sensitivity: most to ``b`` (the predictions read
#: it directly), less to ``S`` (regularised after the release, docs/whole_rows.md#regularisation), little to
#: ``q`` (only the fit of the noise variance reads it). Chosen on synthetic data and the !Kung protocol
#: (docs/whole_rows.md#the-split); any public split is private.
DEFAULT_SHARES = (0.30, 0.68, 0.02)


#: Names of the parts, in the order of the released vector.
PARTS = ("S", "b", "q")


#: A release whose floating-point slack (:func:`rounding_factor`) would exceed this is refused.
MAX_ROUNDING_SLACK = 0.01



class Scales(NamedTuple):
    """The public multipliers that bring each part to its share of a unit sensitivity."""

    S: float  #: ``w_S / sqrt(2)`` (on the diagonal; off-diagonal entries also get sqrt(2))
    b: float  #: ``w_b / d``
    q: float  #: ``w_q / (d^2 / 4)``


def validate_shares(shares: Any) -> Tuple[float, float, float]:
    """Three finite positive relative shares of ``(S, b, q)``, returned normalised to squares summing to 1
    (``(w_S^2, w_b^2, w_q^2)``); ``ValueError`` / ``TypeError`` otherwise. Public."""
    try:
        values = [float(v) for v in shares]
    except (TypeError, ValueError) as exc:
        raise TypeError(f"shares must be three numbers (S, b, q), got {shares!r}") from exc
    if len(values) != 3 or any(isinstance(v, bool) for v in shares):
        raise TypeError(f"shares must be three numbers (S, b, q), got {shares!r}")
    if not all(math.isfinite(v) and v > 0.0 for v in values):
        raise ValueError(f"shares must be finite and > 0 (each part is released), got {shares!r}")
    total = math.fsum(values)
    return tuple(v / total for v in values)  # type: ignore[return-value]


def part_bounds(d: float) -> Tuple[float, float, float]:
    """The replace-one bounds of ``(S, b, q)`` at unit scale for outputs of width ``d``: ``(sqrt(2), d, d^2/4)``."""
    return math.sqrt(2.0), float(d), float(d) ** 2 / 4.0


def statistic_scales(d: float, shares: Any) -> Scales:
    """The multipliers ``w_part / bound_part`` (``shares``: :func:`validate_shares`)."""
    squares = validate_shares(shares)
    bounds = part_bounds(d)
    return Scales(*(math.sqrt(w2) / bound for w2, bound in zip(squares, bounds)))


def joint_bound(shares: Any) -> float:
    """``J <= 1``: the largest squared L2 shift of the packed vector
    (:func:`~dpgp_gpflow.whole_rows.sensitivity.packed`) between whole-row neighbours,

        J = max(w_S^2 + w_b^2 / 4,  g + w_b^2 / 2) + w_q^2,
        g = w_S^2 + w_b^4 / (16 w_S^2) if w_b^2 <= 4 w_S^2 else w_b^2 / 2

    (``shares`` normalised, :func:`validate_shares`). Derivation (docs/whole_rows.md#sensitivity): with
    features ``u, v`` (norms <= 1, ``c = u.v``) and outputs ``t d / 2, t' d / 2`` (``|t|, |t'| <= 1``) the squared
    shift is ``w_S^2 / 2 (|u|^4 + |v|^4 - 2 c^2) + w_b^2 / 4 (|u|^2 t^2 + |v|^2 t'^2 - 2 c t t') + w_q^2 (t^2 -
    t'^2)^2``: non-decreasing in ``|u|^2`` and ``|v|^2`` at fixed ``c``, so largest at unit norms; its maximum over
    ``c`` is ``g(|t t'|) + w_b^2 / 4 (t^2 + t'^2)`` with ``g(p) = max_|c|<=1 (w_S^2 (1 - c^2) + w_b^2 c p / 2)``,
    non-decreasing in ``t^2`` when ``t^2 >= t'^2`` (so ``t^2 = 1``); with ``x = |t'|``, ``g(x) + w_b^2 / 4 (1 + x^2)``
    is convex in ``x`` (maximal at ``x = 0`` or 1) and ``w_q^2 (1 - x^2)^2 <= w_q^2``. Public."""
    w_S2, w_b2, w_q2 = validate_shares(shares)
    g = w_S2 + w_b2**2 / (16.0 * w_S2) if w_b2 <= 4.0 * w_S2 else w_b2 / 2.0
    return min(1.0, max(w_S2 + w_b2 / 4.0, g + w_b2 / 2.0) + w_q2)


def statistic_dimension(m: int) -> int:
    """The length of the released vector for M inducing inputs: ``M (M + 1) / 2 + M + 1``."""
    m = int(m)
    return m * (m + 1) // 2 + m + 1


def entry_noise_std(noise_std: float, scales: Scales, m: int) -> Dict[str, np.ndarray]:
    """The std of the noise of every entry of :func:`unpack`'s statistics when each entry of the packed
    vector gets noise of std ``noise_std``: ``S`` [M, M] (``noise_std / a_S`` on the diagonal,
    ``noise_std / (sqrt(2) a_S)`` off it; the symmetric noise has the Gaussian orthogonal ensemble's shape),
    ``b`` [M] (``noise_std / a_b``), ``q`` [] (``noise_std / a_q``)."""
    std = float(noise_std)
    m = int(m)
    S = np.full((m, m), std / (scales.S * math.sqrt(2.0)))
    np.fill_diagonal(S, std / scales.S)
    return {"S": S, "b": np.full(m, std / scales.b), "q": np.asarray(std / scales.q)}


def rounding_slack(num_rows: int, chunk_rows: int, num_chunks: int, dimension: int) -> float:
    """The largest L2 distance, in float64, between the computed and the exact sums of two datasets' packed
    vectors of ``dimension`` entries each (:func:`rounding_factor`'s ``2 sqrt(K) t``), as an absolute amount in the
    units where each row's term of each entry has magnitude at most 1. ``FloatingPointError`` when it exceeds
    :data:`MAX_ROUNDING_SLACK` (use smaller chunks). Public."""
    n, c = int(num_rows), int(chunk_rows)
    steps = (c + int(num_chunks) + 8) * UNIT_ROUNDOFF
    if not steps < 0.5:
        raise FloatingPointError(f"chunks of {c} rows are too long for a float64 sum")
    slack = 2.0 * math.sqrt(int(dimension)) * steps * n / (1.0 - steps)
    if not slack <= MAX_ROUNDING_SLACK:
        raise FloatingPointError(
            f"summing {n} rows in chunks of {c} could err by {slack:.2g} of the sensitivity in float64, more than the "
            f"{MAX_ROUNDING_SLACK} this release covers: use smaller chunks (chunk_size=) or a chunked source")
    return slack


def person_sensitivity(shares: Any, person_rows: int = 1, blocks: int = 1) -> float:
    """``G sqrt(B J)``: the largest L2 shift, in exact arithmetic, of the concatenation of ``blocks`` (B) packed
    vectors (one per candidate feature map, each with its own features of norm <= 1) between datasets that differ
    in the rows of one person of at most ``person_rows`` (G) rows (docs/whole_rows.md#persons). A person's
    contribution to each block is the sum of their rows' packed terms ``p(r)``, so replacing rows ``r_1..r_g`` by
    ``r'_1..r'_g`` (``g <= G``: the person's public number of rows) moves it by ``sum_i (p(r_i) - p(r'_i))``, of
    norm at most ``g sqrt(J)`` (triangle inequality, :func:`joint_bound` for each pair), reached when all the
    person's rows are one worst row and all their replacements its worst neighbour; the B blocks of one
    neighbour move by at most that each, ``sqrt(B)`` times it together. Public."""
    G, B = int(person_rows), int(blocks)
    if G < 1 or B < 1:
        raise ValueError(f"person_rows and blocks must be >= 1, got {person_rows!r}, {blocks!r}")
    return G * math.sqrt(B * joint_bound(shares))


def rounding_factor(num_rows: int, chunk_rows: int, num_chunks: int, m: int) -> float:
    """Factor (>= 1) on the unit sensitivity for the floating-point error of the computed sums.

    Each entry of the packed vector is a sum over rows of terms of magnitude at most 1 (``|a_S sqrt(2) phi_j
    phi_k| <= w_S``, ``|a_b phi_j y_c| <= w_b / 2``, ``|a_q y_c^2| <= w_q``); a chunk's sum of ``c`` terms
    (any order, products included) errs by at most ``gamma_{c+1}`` times the sum of their magnitudes
    (Higham 2002, eq. 3.5), adding the chunks' sums (any order) by ``gamma_{chunks}`` more, and scaling by a
    few roundings: at most ``t = (c + chunks + 8) u n / (1 - (c + chunks + 8) u)`` per entry, ``sqrt(K) t``
    in L2 over the ``K`` entries, twice that between two datasets' computations. The features' unit-norm
    rescaling leaves a norm of at most ``1 + (M + 4) u``. So the computed vectors of neighbours differ by at
    most ``(1 + (M + 4) u)^2 + 2 sqrt(K) t``, times :data:`~dpgp_gpflow.mechanisms.rounding.SENSITIVITY_SAFETY`.
    ``FloatingPointError`` when the slack exceeds :data:`MAX_ROUNDING_SLACK` (use smaller chunks). Public."""
    slack = rounding_slack(num_rows, chunk_rows, num_chunks, statistic_dimension(m))
    return ((1.0 + (int(m) + 4) * UNIT_ROUNDOFF) ** 2 + slack) * SENSITIVITY_SAFETY


def release_sensitivity(shares: Any, *, m: int, num_rows: int, chunk_rows: int, num_chunks: int,
                        person_rows: int = 1, blocks: int = 1) -> float:
    """The L2 sensitivity of the computed concatenated vector (``blocks`` packed vectors of M inducing inputs)
    between neighbours differing in one person of at most ``person_rows`` rows: :func:`person_sensitivity`
    with every feature norm up to ``1 + (M + 4) u`` (squared: the terms of ``S``), plus the absolute
    :func:`rounding_slack` of the sums (it does not scale with the exact shift), times
    :data:`~dpgp_gpflow.mechanisms.rounding.SENSITIVITY_SAFETY`. Public."""
    exact = person_sensitivity(shares, person_rows, blocks)
    slack = rounding_slack(num_rows, chunk_rows, num_chunks, int(blocks) * statistic_dimension(m))
    return (exact * (1.0 + (int(m) + 4) * UNIT_ROUNDOFF) ** 2 + slack) * SENSITIVITY_SAFETY



def released_sensitivity(shares: Any, *, m: int, multiplier: float, num_rows: int, chunk_rows: int,
                         num_chunks: int, person_rows: int = 1, blocks: int = 1) -> float:
    """The sensitivity a whole-row release charges: :func:`release_sensitivity` for its chunking, persons and
    ``blocks`` candidates, inflated for the exact sampler's grid at noise ``multiplier``
    (:func:`~dpgp_gpflow.sampling.gaussian_grid_factor` over the released vector's ``blocks`` x
    :func:`statistic_dimension` entries). Public."""
    exact_and_rounding = release_sensitivity(shares, m=m, num_rows=num_rows, chunk_rows=chunk_rows,
                                             num_chunks=num_chunks, person_rows=person_rows, blocks=blocks)
    return exact_and_rounding * gaussian_grid_factor(multiplier, int(blocks) * statistic_dimension(m))
