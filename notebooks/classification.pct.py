# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Differentially private GP classification (Laplace approximation + cloaking)
#
# This notebook reproduces the classification figures of Smith et al. (JMLR 2019, section 6):
#
# * **Figure 6**: home-equity loans (HMEQ), the probability of default (BAD) against the number of
#   delinquent credit lines (DELINQ), one input dimension;
# * **Figure 7**: a synthetic two-dimensional "stripes" problem with a density gradient;
# * **Figure 8**: MNIST (digits 0-4 against 5-9) in 225 dimensions with the *sparse* classifier.
#
# ## The privacy model
#
# * Inputs `X` are **public**; the labels `y` in {-1, +1} are **private**. Two data sets are
#   neighbours when one label differs, so a label moves by at most `d = 2`.
# * The kernel hyperparameters (and, for the sparse model, the inducing inputs, here k-means on `X`)
#   are **public and chosen a priori**. Training them on the labels would leak them: `release`
#   refuses after the training objective was evaluated unless told the hyperparameters are public.
#
# ## The mechanism
#
# The Laplace approximation finds the posterior mode by Newton steps. From a *public* starting point
# `f`, one Newton step is affine in the labels,
#
# $$f_{\text{new}} = C y + b, \qquad C = \tfrac12 (K^{-1} + W)^{-1},$$
#
# with `C` and `b` depending on `K` and `f` only. From `f0 = 0` (so `W = I/4`, `b = 0`) the first step
# is `f1 = C y`, which `DPLaplaceGPC.release` publishes with the cloaking mechanism: Gaussian noise
# whose covariance is optimised for the columns of `C`. Predictions use
# $\mathbb{E}[f_*] = k_*^\top K^{-1} \tilde f$ (never the usual gradient form, which reads the labels)
# and the variance includes the DP noise propagated to $f_*$ (the papers left it out). A second Newton
# step from the released $\tilde f_1$ is a second release; `steps=T` splits the budget as
# $(\varepsilon/T, \delta/T)$ per step.
#
# `DPSparseLaplaceGPC` uses the subset-of-regressors approximation in weight space, `f = Phi w`, and
# releases the m weights of the first Newton step once: predictions anywhere are then free.
#
# This notebook is written from the **data owner's seat**: it also shows the non-DP predictions,
# which a real publisher would not show.

# %%
import os

import gpflow
import matplotlib.pyplot as plt
import numpy as np

from dpgp_gpflow import PrivacyAccountant
from dpgp_gpflow.datasets import default_data_dir, load_hmeq, load_mnist_binary, make_stripes, stripes_test_grid
from dpgp_gpflow.models.dp_laplace import DPLaplaceGPC, DPSparseLaplaceGPC
from dpgp_gpflow.models import kmeans_inducing_inputs

gpflow.config.set_default_float(np.float64)
EPSILON, DELTA = 1.0, 0.01


def reduce_in_tests(n, test_n):
    """``test_n`` when the notebook runs as a test (``DPGP_NOTEBOOK_REDUCED`` is set), else ``n``."""
    return test_n if os.environ.get("DPGP_NOTEBOOK_REDUCED") else n


print("data folder:", default_data_dir())

# %% [markdown]
# ## Figure 6: home-equity loans
#
# 200 rows of `hmeq.csv`, sampled by a public rule to balance DELINQ (zero / non-zero) and BAD (the
# papers' protocol), EQ kernel with lengthscale 4 credit lines. Each DP release publishes the 200
# training latents of the first Newton step; we then predict P(BAD) at DELINQ = 0..14 for free.
# The papers show 100 releases: each is a separate (1, 0.01)-DP release (publishing all 100 would
# cost 100 times the budget; they show the spread of what *one* release could look like).

# %%
X, Y = load_hmeq(n=200, seed=0)
hmeq = DPLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=4.0), hyperparameters_public=True)
Xq = np.arange(15, dtype=float)[:, None]
p_nondp = hmeq.predict_y(Xq)[0].numpy()[:, 0]
f_nondp = hmeq.predict_f(Xq)[0].numpy()[:, 0]

with PrivacyAccountant(epsilon=EPSILON, delta=DELTA) as acc:
    first = hmeq.release(epsilon=EPSILON, delta=DELTA)  # seed=None: noise from the OS CSPRNG
print(acc)
n_hmeq = reduce_in_tests(100, 3)
dp = [first] + [hmeq.release(epsilon=EPSILON, delta=DELTA) for _ in range(n_hmeq - 1)]
P = np.stack([pc.predict_y(Xq)[0][:, 0] for pc in dp])  # [releases, 15]
F = np.stack([pc.predict_f(Xq)[0][:, 0] for pc in dp])
rel = first.releases[0]
print(f"rank of the release {rel.rank}, noise std at the training latents {rel.noise_std.min():.2f}..{rel.noise_std.max():.2f}")

# %%
fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
bad = [np.sum((X[:, 0] == v) & (Y[:, 0] > 0)) for v in Xq[:, 0]]
good = [np.sum((X[:, 0] == v) & (Y[:, 0] < 0)) for v in Xq[:, 0]]
axes[0].bar(Xq[:, 0], good, color="tab:blue", label="BAD = 0")
axes[0].bar(Xq[:, 0], bad, bottom=good, color="tab:red", label="BAD = 1")
axes[0].set_ylabel("count")
axes[0].legend()
if P.shape[0] >= 3:
    axes[1].violinplot(P, positions=Xq[:, 0], widths=0.8, showextrema=False)
    axes[2].violinplot(F, positions=Xq[:, 0], widths=0.8, showextrema=False)
axes[1].plot(Xq[:, 0], P.T, ".", color="tab:gray", alpha=0.3, ms=3)
axes[1].plot(Xq[:, 0], p_nondp, "kx", ms=8, label="non-DP")
axes[1].set_ylabel("P(BAD)")
axes[1].legend()
axes[2].plot(Xq[:, 0], f_nondp, "kx", ms=8)
axes[2].set_ylabel("latent mean")
axes[2].set_xlabel("DELINQ")
fig.suptitle(f"HMEQ: {P.shape[0]} separate ({EPSILON}, {DELTA})-DP releases")
fig.tight_layout()

# %% [markdown]
# Where data are plentiful (few delinquent lines) the DP predictions agree with the non-DP one;
# beyond five or six lines the data are scarce, the DP noise dominates and the predicted
# probabilities spread towards 0 and 1 (the link function squashes large latent values). The
# `predict_y` probabilities here already include the DP noise variance in the probit approximation,
# which pulls them towards 1/2 where the noise is large.

# %% [markdown]
# ## Figure 7: stripes
#
# 200 points in noisy diagonal stripes, dense at the bottom and scarce at the top; EQ lengthscale
# 3.5; the 10 x 10 test grid holds 50 points of each class. The papers report 81% accuracy without
# DP, 69% with one DP Newton step and 51% with two.

# %%
Xs, Ys = make_stripes(200, seed=0)
Xg, Yg = stripes_test_grid()
stripes = DPLaplaceGPC((Xs, Ys), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=3.5),
                       hyperparameters_public=True)
acc_nondp = np.mean(np.where(stripes.predict_y(Xg)[0].numpy() >= 0.5, 1.0, -1.0) == Yg)
n_stripes = reduce_in_tests(25, 1)
one = [stripes.release(epsilon=EPSILON, delta=DELTA) for _ in range(n_stripes)]
acc_one = [np.mean(pc.predict_class(Xg) == Yg) for pc in one]
two = [stripes.release(epsilon=EPSILON, delta=DELTA, steps=2) for _ in range(reduce_in_tests(n_stripes, 1))]
acc_two = [np.mean(pc.predict_class(Xg) == Yg) for pc in two]
print(f"accuracy without DP {100 * acc_nondp:.0f}% (published 81%)")
print(f"DP, one Newton step: {100 * np.mean(acc_one):.0f}% over {len(one)} releases (published 69%)")
print(f"DP, two Newton steps at (eps/2, delta/2) each: {100 * np.mean(acc_two):.0f}% over {len(two)} releases (published 51%)")

# %%
g = np.linspace(0.0, 10.0, reduce_in_tests(60, 25))
G1, G2 = np.meshgrid(g, g)
Xfine = np.column_stack([G1.ravel(), G2.ravel()])
maps = [("no DP", stripes.predict_y(Xfine)[0].numpy()), ("one DP release (1 step)", one[0].predict_y(Xfine)[0])]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
for ax, (title, p) in zip(axes[:2], maps):
    cs = ax.contourf(G1, G2, p.reshape(G1.shape), levels=np.linspace(0, 1, 11), cmap="RdBu_r")
    ax.contour(G1, G2, p.reshape(G1.shape), levels=[0.5], colors="k")
    ax.set_title(f"P(+1): {title}")
frac = np.mean([pc.predict_class(Xg)[:, 0] > 0 for pc in one], axis=0)
axes[2].scatter(Xg[:, 0], Xg[:, 1], c=frac, s=150, cmap="RdBu_r", vmin=0, vmax=1, edgecolors="k")
axes[2].set_title(f"fraction of {len(one)} DP releases predicting +1")
for ax in axes:
    ax.plot(*Xs[Ys[:, 0] > 0].T, "+", color="tab:red", ms=5)
    ax.plot(*Xs[Ys[:, 0] < 0].T, "x", color="tab:blue", ms=4)
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
fig.colorbar(cs, ax=axes, shrink=0.8)

# %% [markdown]
# At the bottom, where the data are dense, the DP decision map follows the non-DP one; towards the
# sparse top the DP noise produces confident but unstable predictions. The propagated DP noise
# variance is part of `predict_f`'s variance, so it can be shown as uncertainty:

# %%
noise_sd = np.sqrt(one[0].dp_noise_variance(Xfine)[:, 0])
fig, ax = plt.subplots(figsize=(5, 4.4))
cs = ax.contourf(G1, G2, noise_sd.reshape(G1.shape), levels=12, cmap="viridis")
ax.plot(*Xs.T, ".", color="w", ms=3)
fig.colorbar(cs, ax=ax, label="DP noise sd of the latent mean")
ax.set_title("where the DP noise is large")

# %% [markdown]
# ## Figure 8: MNIST with the sparse classifier
#
# Digits 0-4 against 5-9, downsampled to 15 x 15, 256 training and 100 test images. The JMLR
# lengthscales are on the 0..255 pixel scale, so we load the pixels with `pixel_max=255`. EQ
# kernel with variance 1; inducing inputs by k-means on the (public) training images.
# `DPSparseLaplaceGPC` releases the m weights once; accuracy on the test images is then free.

# %%
Xm, Ym, Xmt, Ymt = load_mnist_binary(n_train=256, n_test=100, size=15, pixel_max=255.0)
chance = max(np.mean(Ymt > 0), np.mean(Ymt < 0))
ms = reduce_in_tests([4, 8, 16, 32, 64, 128, 200], [16])
lengthscales = reduce_in_tests([190.0, 380.0, 760.0], [380.0])
n_mnist = reduce_in_tests(10, 2)
acc_dp, acc_no = {}, {}
for m in ms:
    Z = kmeans_inducing_inputs(Xm, m)
    for ls in lengthscales:
        model = DPSparseLaplaceGPC((Xm, Ym), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=ls), Z,
                                   hyperparameters_public=True)
        acc_no[ls, m] = np.mean(np.where(model.predict_y(Xmt)[0].numpy() >= 0.5, 1.0, -1.0) == Ymt)
        acc_dp[ls, m] = np.mean([np.mean(model.release(epsilon=EPSILON, delta=DELTA).predict_class(Xmt) == Ymt)
                                 for _ in range(n_mnist)])
        print(f"m = {m:3d}, lengthscale {ls:5.0f}: no DP {100 * acc_no[ls, m]:.0f}%, DP {100 * acc_dp[ls, m]:.0f}%")

# %%
fig, ax = plt.subplots(figsize=(7, 4.5))
shades = plt.cm.Greys(np.linspace(0.9, 0.4, len(lengthscales)))
for ls, c in zip(lengthscales, shades):
    ax.plot(ms, [acc_no[ls, m] for m in ms], "-o", color=c, label=f"no DP, l = {ls:.0f}")
    ax.plot(ms, [acc_dp[ls, m] for m in ms], "--s", color=c, label=f"DP, l = {ls:.0f}")
ax.axhline(chance, color="k", lw=0.8)
ax.axhline(0.68, color="tab:red", lw=0.8, ls=":", label="published DP (l = 380, m = 16)")
ax.set_xscale("log")
ax.set_xlabel("inducing inputs")
ax.set_ylabel("test accuracy")
ax.legend(fontsize=8)
ax.set_title(f"MNIST 0-4 vs 5-9, ({EPSILON}, {DELTA})-DP, {n_mnist} releases per point")

# %% [markdown]
# As in the paper, the DP classifier prefers long lengthscales and few inducing inputs (each
# label has less influence on each released weight), while the non-DP classifier improves with
# more inducing inputs. `benchmarks/classification.py` runs the full grid (16 numbers of inducing
# inputs, four lengthscales, 25 releases each) and the tables in `benchmarks/RESULTS.md`.
#
# ## Privacy checklist
#
# * Each `release` call is one (epsilon, delta)-DP release; a `PrivacyAccountant` refuses releases
#   past its budget (checked before any noise is drawn, including all steps of a multi-step release).
# * Predictions from a released classifier (`predict_f`, `predict_y`, `predict_class`) read only the
#   released vector and public quantities: they cost nothing.
# * The models' own `predict_f` / `predict_y` are the non-private Laplace predictions: not for
#   publication.
