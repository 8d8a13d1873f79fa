"""Shared pieces of the property-based (hypothesis) fuzz tests of every public entry point.

Every fuzzed call either raises one of the documented errors (and then has drawn no noise, spent
no budget and put no private output in its message) or returns a release that passes an exact
audit: the package's own :func:`dpgp_gpflow.audit` and, independently, ``mu = d max_i ||F^+ c_i||``
recomputed here in NumPy from the published noise factor and the public cloaking matrix, with the
analytic-Gaussian epsilon at the release's delta computed here with SciPy (mpmath only to confirm a
failure at 50 digits, so that float64 rounding in this check cannot fail a correct release).

Sizes are small (n <= 12, k <= 6) and every test is derandomized with no example database, so the
suite is reproducible and runs in about a minute.
"""

from __future__ import annotations

import math
import os
import warnings
from fractions import Fraction
from decimal import Decimal
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import tensorflow as tf
from hypothesis import HealthCheck, Phase, currently_in_test_context, event, settings
from hypothesis import strategies as st
from scipy import optimize, special

import dpgp_gpflow as dp
from dpgp_gpflow import BudgetExceededError, PrivacyLeakError

#: Errors every entry point documents for refused input.
DOCUMENTED: Tuple[type, ...] = (TypeError, ValueError, BudgetExceededError, PrivacyLeakError)
#: The Gaussian releases also document FloatingPointError (docs/mechanisms.md#rounding: a noise
#: covariance with condition number above 1e11 is refused).
RELEASE_ERRORS: Tuple[type, ...] = DOCUMENTED + (FloatingPointError,)

#: Relative slack of the audits (floating point only), as in dpgp_gpflow.privacy_audit.
AUDIT_RTOL = 1e-6


#: Shrinking a failure re-runs releases hundreds of times (minutes): off unless FUZZ_SHRINK=1.
PHASES = tuple(p for p in Phase if p is not Phase.shrink or os.environ.get("FUZZ_SHRINK") == "1")


def fuzz_settings(max_examples: int) -> settings:
    """Bounded, reproducible hypothesis settings (function-scoped fixtures are reset by hand)."""
    return settings(
        max_examples=max_examples,
        phases=PHASES,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                               HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# ---------------------------------------------------------------------------------------------
# Private outputs that cannot be mistaken for anything public.

#: Distinctive private outputs (inside LO_HI) and two outside (clipped at construction).
PRIVATE_INSIDE = (12345.678, 12876.5432, 12001.2345, 12999.8765, 12567.891)
PRIVATE_OUTSIDE = (98765.4321, -34567.8912)
LO_HI = (12000.0, 13000.0)


def private_tokens(values: Iterable[float]) -> List[str]:
    """Substrings that would betray a private value in a message: its first five significant
    digits, as fixed-point and scientific notation would print them ("12345", "1.2345")."""
    tokens = set()
    for v in values:
        v = float(v)
        if not math.isfinite(v) or v == 0.0:
            continue
        digits = f"{abs(v):.12e}".split("e")[0].replace(".", "")
        tokens.add(digits[:5])
        tokens.add(digits[0] + "." + digits[1:5])
    return sorted(tokens)


#: The private values' printed forms, which no error message may contain.
TOKENS = private_tokens(PRIVATE_INSIDE + PRIVATE_OUTSIDE)
#: A small valid training set shared by the fuzz tests: public inputs, private outputs holding the
#: private values (some outside LO_HI), labels in {-1, +1} and 3 public inducing inputs.
N = 8
X_TRAIN = np.linspace(0.0, 3.0, N)[:, None]
Y_TRAIN = np.array([[v] for v in (PRIVATE_INSIDE + PRIVATE_OUTSIDE + PRIVATE_INSIDE)[:N]])
LABELS = np.array([[1.0], [1.0], [-1.0], [1.0], [-1.0], [-1.0], [1.0], [-1.0]])
Z_TRAIN = X_TRAIN[::3]


def assert_no_private(text: str, tokens: Sequence[str], where: str) -> None:
    leaked = [t for t in tokens if t in text]
    assert not leaked, f"{where} carries private output digits {leaked}: {text!r}"


# ---------------------------------------------------------------------------------------------
# Strategies.

SPECIALS = (math.nan, math.inf, -math.inf, 1e300, -1e300, 1e-300, 5e-324, 0.0, -0.0, 1e200)


@st.composite
def float_matrix(draw, rows: st.SearchStrategy, cols: st.SearchStrategy, lo: float = -3.0, hi: float = 3.0,
                 specials: Sequence[float] = SPECIALS, special_probability: int = 4) -> np.ndarray:
    """A float64 matrix of "ordinary" values, with (about one in ``special_probability`` times)
    one entry replaced by a special value (nan, inf, huge, tiny, subnormal, signed zero)."""
    n, d = draw(rows), draw(cols)
    values = draw(st.lists(st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64),
                           min_size=n * d, max_size=n * d))
    X = np.array(values, dtype=np.float64).reshape(n, d)
    if X.size and specials and draw(st.integers(0, special_probability - 1)) == 0:
        i = draw(st.integers(0, X.size - 1))
        X.flat[i] = draw(st.sampled_from(list(specials)))
    return X


def as_container(X: np.ndarray, kind: str) -> Any:
    """``X`` as one of the containers users pass: numpy dtypes, object arrays, pandas, lists, tensors."""
    if kind == "float64":
        return X
    if kind == "float32":
        with np.errstate(over="ignore", invalid="ignore"):
            return X.astype(np.float32)
    if kind == "int":
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(np.round(X), nan=0.0, posinf=7.0, neginf=-7.0).clip(-1e6, 1e6).astype(np.int64)
    if kind == "bool":
        return X > 0
    if kind == "object":
        return X.astype(object)
    if kind == "str":
        return X.astype(str)
    if kind == "dataframe":
        return pd.DataFrame(X)
    if kind == "series":
        return pd.Series(X[:, 0]) if X.ndim == 2 and X.shape[1] >= 1 else pd.Series(X.reshape(-1))
    if kind == "list":
        return X.tolist()
    if kind == "tensor":
        return tf.constant(X)
    if kind == "1d":
        return X.reshape(-1)
    if kind == "3d":
        return X[None]
    if kind == "transposed":
        return X.T
    if kind == "none":
        return None
    if kind == "scalar":
        return 0.5
    raise AssertionError(kind)


CONTAINERS = ("float64", "float32", "int", "bool", "object", "str", "dataframe", "series", "list", "tensor",
              "1d", "3d", "transposed", "none", "scalar")
#: Containers that hold valid data when the values are valid (the rest must be refused).
GOOD_CONTAINERS = ("float64", "float32", "int", "dataframe", "list", "tensor")


def containers(valid: bool = False) -> st.SearchStrategy:
    """A container kind: only those that hold valid data when ``valid``, else any (good ones likelier)."""
    if valid:
        return st.sampled_from(GOOD_CONTAINERS)
    return st.sampled_from(list(GOOD_CONTAINERS) * 2 + list(CONTAINERS))


#: epsilon / delta at and beyond their limits, and of every wrong type.
WRONG_TYPES = (True, False, "1", "0.01", None, b"1", Decimal("0.5"), 1 + 0j, np.array(0.5), np.array([0.5]),
               [0.5], np.bool_(True))


def epsilons(lo: float = 0.05, hi: float = 20.0, extremes: Sequence[Any] = (),
             valid: bool = False) -> st.SearchStrategy:
    """Ordinary epsilons and valid ``extremes``; unless ``valid``, also the limits (0, -0, negative,
    inf, nan) and wrong types."""
    odd_types = (np.float32(0.75), np.int64(2), Fraction(1, 2), 1)
    good = st.one_of(st.floats(lo, hi), st.sampled_from(odd_types + tuple(extremes)))
    if valid:
        return good
    bad = (0.0, -0.0, -1.0, math.inf, -math.inf, math.nan, 0)
    return st.one_of(good, st.sampled_from(bad + WRONG_TYPES))


def deltas(extremes: Sequence[Any] = (), valid: bool = False) -> st.SearchStrategy:
    """Ordinary deltas in (0, 1) and valid ``extremes``; unless ``valid``, also the limits (0, 1, >1,
    negative, inf, nan) and wrong types."""
    odd_types = (np.float32(0.01), Fraction(1, 100))
    good = st.one_of(st.floats(1e-8, 0.5), st.sampled_from((1e-2, 1e-5, 0.1) + odd_types + tuple(extremes)))
    if valid:
        return good
    bad = (0.0, -0.0, 1.0, 1, 0, 2.0, -1e-3, math.inf, math.nan, 5e-324, 1e-320)  # subnormal: refused
    return st.one_of(good, st.sampled_from(bad + WRONG_TYPES))


def corrupted(data: Any, names: Sequence[str], max_size: int = 2) -> set:
    """Which of ``names`` this example draws from its full (possibly invalid) strategy; the rest are
    drawn valid, so that about half the examples are valid calls that must succeed and be audited."""
    if data.draw(st.booleans(), label="all valid"):
        return set()
    return data.draw(st.sets(st.sampled_from(list(names)), min_size=1, max_size=max_size), label="corrupted")


def bounds_strategy(good: Tuple[float, float], valid: bool = False) -> st.SearchStrategy:
    """``y_bounds``: the good pair often, else reversed, equal, non-finite, wrong length or type."""
    lo, hi = good
    bad = [(hi, lo), (lo, lo), (lo, math.inf), (math.nan, hi), (-math.inf, hi), (lo,), (lo, hi, hi + 1), None,
           ("a", "b"), (True, hi), (lo, False), "ab", lo, {"lo": lo, "hi": hi}, np.array([lo, hi, 0.0]),
           np.array([[lo, hi]]), (Decimal(1), Decimal(2)),
           (-1e308, 1e308), (1e308, 1.7e308), (0.0, 5e-324)]  # overflowing width / midpoint, subnormal width
    fine = [good, [lo, hi], np.array([lo, hi]), (np.float32(lo), np.float32(hi)), (int(lo), int(hi)),
            (np.int64(lo), np.int64(hi)), pd.Series([lo, hi]), (Fraction(int(lo)), Fraction(int(hi)))]
    if valid:
        return st.sampled_from(fine)
    return st.one_of(st.sampled_from(fine), st.sampled_from(bad))


def data_sensitivities(width: float, valid: bool = False) -> st.SearchStrategy:
    fine = [None, None, width, width / 2, width * 1e-9, np.float32(width / 4), 1]
    if valid:
        return st.sampled_from(fine)
    return st.sampled_from(fine + [width * 1.5, 0.0, -1.0, math.nan, math.inf, True, "1", 5e-324, 1e-310])


def seeds(valid: bool = True) -> st.SearchStrategy:
    """None or non-negative integers; unless ``valid``, also negative, float, bool, huge and
    non-numeric seeds (validation.validate_seed refuses them before any budget is reserved)."""
    good = [None, None, 0, 7, np.int64(3), 2**128 - 1]
    if valid:
        return st.sampled_from(good)
    return st.sampled_from(good + [-1, np.int64(-3), 1.5, 3.0, True, np.bool_(False), 2**128, 10**40, "a", [1]])


# ---------------------------------------------------------------------------------------------
# Running one fuzzed call.


class Outcome:
    """What one fuzzed call did: its result or documented refusal, and every warning message."""

    def __init__(self, result: Any, error: Optional[BaseException], messages: List[str]) -> None:
        self.result, self.error, self.messages = result, error, messages

    @property
    def refused(self) -> bool:
        return self.error is not None


def held_budget(acc: dp.PrivacyAccountant) -> Any:
    """Budget an accountant still holds for releases under way (nothing once a call returned)."""
    held = getattr(acc, "held", None)
    if held is not None:
        return tuple(held)
    return {k: v for k, v in getattr(acc, "_held", {}).items() if v}


def nothing_held(acc: dp.PrivacyAccountant) -> bool:
    held = held_budget(acc)
    return held == (0.0, 0.0) if isinstance(held, tuple) else not held


def _event(label: str) -> None:
    """Label the example for ``--hypothesis-show-statistics`` (outside hypothesis: nothing)."""
    if currently_in_test_context():
        event(label)


def run_call(call: Callable[[], Any], draws: list, accountants: Sequence[dp.PrivacyAccountant] = (),
             tokens: Sequence[str] = (), allowed: Tuple[type, ...] = DOCUMENTED) -> Outcome:
    """Run ``call``; a refusal must be one of ``allowed``, with no noise drawn, every accountant's
    ledger unchanged and nothing held, and no private digits in its message. Any other exception
    propagates (an internal error is a failure). Warning messages must not carry private digits."""
    draws.clear()
    before = [acc.ledger for acc in accountants]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
        except allowed as exc:
            message = str(exc)
            assert_no_private(message, tokens, f"{type(exc).__name__} message")
            assert draws == [], f"refused with {type(exc).__name__} ({exc}) after drawing noise: {draws}"
            for acc, ledger in zip(accountants, before):
                assert acc.ledger == ledger, f"refused with {type(exc).__name__} ({exc}) but the ledger changed"
                assert nothing_held(acc), f"refused with {type(exc).__name__} ({exc}) but budget is still held"
            outcome = Outcome(None, exc, [str(w.message) for w in caught])
            _event(f"refused: {type(exc).__name__}")
        else:
            _event("succeeded")
            for acc in accountants:
                assert nothing_held(acc), "the call returned but budget is still held"
            outcome = Outcome(result, None, [str(w.message) for w in caught])
    for m in outcome.messages:
        assert_no_private(m, tokens, "warning")
    return outcome


class ReleaseShare:
    """Counts the examples drawn valid and how many of them released: a fuzz test that accepts any
    documented refusal could otherwise pass with every valid call refused. ``check(minimum)`` asserts that
    at least ``minimum`` of the valid draws released (a refusal for want of budget is counted apart,
    as the accountants drawn include small ones on purpose, and must stay a minority too)."""

    def __init__(self) -> None:
        self.valid = 0
        self.released = 0
        self.over_budget = 0
        self.refusals: Dict[str, int] = {}

    def count(self, valid: bool, outcome: Outcome) -> None:
        if not valid:
            return
        self.valid += 1
        if not outcome.refused:
            self.released += 1
        elif isinstance(outcome.error, dp.BudgetExceededError):
            self.over_budget += 1
        else:
            key = f"{type(outcome.error).__name__}: {str(outcome.error)[:80]}"
            self.refusals[key] = self.refusals.get(key, 0) + 1

    def check(self, minimum: float = 0.8, least: int = 5) -> None:
        assert self.valid >= least, f"only {self.valid} examples drawn valid"
        within_budget = self.valid - self.over_budget
        assert within_budget >= least and self.released >= minimum * within_budget, (
            f"{self.released} of {within_budget} valid draws within budget released "
            f"({self.over_budget} over budget); refusals: {self.refusals}")
        assert self.over_budget <= 0.5 * self.valid, f"{self.over_budget} of {self.valid} valid draws over budget"


# ---------------------------------------------------------------------------------------------
# The independent audit (NumPy + SciPy).


def _log_gaussian_delta(eps: float, mu: float) -> float:
    """log delta(eps) of a mu-Gaussian mechanism, delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2),
    computed as log Phi(a) + log(1 - exp(eps + log Phi(b) - log Phi(a))) so that nothing underflows."""
    a = -eps / mu + mu / 2.0
    b = -eps / mu - mu / 2.0
    la, lb = float(special.log_ndtr(a)), float(special.log_ndtr(b))
    t = eps + lb - la
    if not t < 0.0:
        return -math.inf
    return la + math.log(-math.expm1(t))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon with delta(epsilon) <= delta for a Gaussian mechanism of parameter mu (SciPy)."""
    if not mu > 0.0:
        return 0.0
    if not math.isfinite(mu):
        return math.inf
    target = math.log(delta)
    if _log_gaussian_delta(0.0, mu) <= target:
        return 0.0

    def f(e: float) -> float:
        v = _log_gaussian_delta(e, mu)
        return max(v, -1e300) - target

    hi = 1.0
    while f(hi) > 0.0:
        hi *= 2.0
        if not math.isfinite(hi):
            return math.inf
    return float(optimize.brentq(f, 0.0, hi, xtol=1e-300, rtol=1e-15, maxiter=2000))


def gaussian_delta_mp(eps: float, mu: float) -> float:
    """delta(eps) of a mu-Gaussian mechanism at 50 digits (mpmath; a dependency of dp-accounting)."""
    import mpmath

    with mpmath.workdps(50):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


def release_mu(noise_factor: Any, C: Any, d: float) -> float:
    """``d max_i ||F^+ c_i||``: the Gaussian-DP parameter of a release whose noise is ``F xi`` when a
    neighbour shifts the released vector by ``d c_i`` (projected onto span(F): F^+ P = F^+)."""
    F = np.asarray(noise_factor, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    assert F.ndim == 2 and C.ndim == 2 and F.shape[0] == C.shape[0], (F.shape, C.shape)
    assert np.all(np.isfinite(F)), "the published noise factor is not finite"
    assert np.all(np.isfinite(C)), "the public cloaking matrix is not finite"
    if F.shape[1] == 0 or not np.any(F):
        return 0.0 if not np.any(C) else math.inf
    coef = np.linalg.lstsq(F, C, rcond=None)[0]  # [r, n] = F^+ C
    return float(d * np.max(np.linalg.norm(coef, axis=0))) if coef.size else 0.0


def assert_gaussian_release(rel: dp.PrivateRelease, C: Any, *, epsilon: Optional[float] = None,
                            delta: Optional[float] = None) -> None:
    """The independent exact audit of one Gaussian release against its public map ``C``."""
    assert isinstance(rel, dp.PrivateRelease)
    assert np.all(np.isfinite(rel.mean)), "the released mean is not finite"
    assert np.all(np.isfinite(rel.noise_std)) and np.all(rel.noise_std >= 0.0)
    if epsilon is not None:
        assert rel.epsilon == epsilon, (rel.epsilon, epsilon)
    if delta is not None:
        assert rel.delta == delta, (rel.delta, delta)
    mu = release_mu(rel.noise_factor, C, rel.data_sensitivity)
    eps_hat = gaussian_epsilon(mu, rel.delta)
    limit = rel.epsilon * (1.0 + AUDIT_RTOL)
    if not eps_hat <= limit:
        # confirm at 50 digits before failing (delta is increasing as epsilon decreases)
        achieved = gaussian_delta_mp(limit, mu)
        assert achieved <= rel.delta, (
            f"release claims (epsilon={rel.epsilon}, delta={rel.delta}) but mu={mu} gives epsilon={eps_hat} "
            f"(delta at the claim: {achieved})")


def assert_package_audit(released: Any, model: Any, Xnew: Any = None) -> None:
    """dpgp_gpflow.audit must pass on every release (at every epsilon: its analytic-Gaussian epsilon
    is exact at the extremes too)."""
    report = dp.audit(released, model, Xnew)
    assert report.passed, report


def assert_charged(acc: dp.PrivacyAccountant, before: Tuple, releases: Sequence[dp.PrivateRelease]) -> None:
    """The accountant gained exactly one Gaussian event per release, with its (epsilon, delta)."""
    new = acc.ledger[len(before):]
    assert acc.ledger[:len(before)] == before
    assert len(new) == len(releases), (new, releases)
    for ev, rel in zip(new, releases):
        assert ev.kind == "gaussian"
        assert math.isclose(ev.epsilon, rel.epsilon, rel_tol=1e-12), (ev, rel.epsilon)
        assert math.isclose(ev.delta, rel.delta, rel_tol=1e-12), (ev, rel.delta)
        assert math.isclose(ev.mu, 1.0 / rel.noise_multiplier, rel_tol=1e-9), (ev.mu, rel.noise_multiplier)
