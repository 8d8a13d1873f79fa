"""``dpgp predict``: predictions from a released function (sparse, multi-class, whole-row): post-processing, no privacy
cost.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..io.tables import columns
from .classify import label_names
from .common import StagedFile, UsageError, checked_output, load_release, output_names, read_args_table

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


def cmd_predict(args) -> int:
    import pandas as pd

    if not Path(args.release).is_file():  # the checks that need no model first, then TensorFlow
        raise UsageError(f"{args.release}: no such file")
    at = Path(args.at)
    inputs = read_args_table(args, at)
    out = checked_output(Path(args.output), args.force, ("release", args.release), ("--at", args.at))
    released, card = load_release(Path(args.release))
    from ..models.multiclass import PrivateMulticlassClassifier
    from ..released import PrivateClassifier, PrivateFunction
    from ..whole_rows.classification import WholeRowsClassifier
    from ..whole_rows.released import WholeRowsRelease
    from ..whole_rows.histogram_release import HistogramResidualRelease
    from ..whole_rows.residual_release import ResidualRelease

    if isinstance(released, PrivateMulticlassClassifier):  # several classes: a probability per class
        dim = released.input_dim
    elif isinstance(released, (WholeRowsRelease, WholeRowsClassifier, ResidualRelease,
                               HistogramResidualRelease)):  # whole rows: a function
        dim = released.features.input_dim
    elif isinstance(released, PrivateFunction):
        dim = released.readout.input_dim
    else:
        raise UsageError(f"{args.release} holds values at fixed inputs, not a function: nothing to predict "
                         "(release with --sparse M to predict anywhere)")
    names = card.get("columns") or []
    if not (isinstance(names, list) and all(isinstance(c, str) for c in names)
            and (not names or len(names) == dim)):
        raise UsageError(f"{args.release}: its card's columns must be {dim} column "
                         f"name(s), got {names!r}")
    if not names:
        names = [c for c in inputs.frame.columns][: dim]
    Xq = columns(inputs, names)
    table = pd.DataFrame(Xq, columns=names)  # the inputs as read (numbers, whatever their CSV format)
    if isinstance(released, PrivateMulticlassClassifier) or (isinstance(released, WholeRowsClassifier)
                                                             and released.num_classes is not None):
        P = released.predict_y(Xq)[0]
        table = table.assign(**{f"p_class_{c}": P[:, c] for c in range(P.shape[1])}, predicted_class=P.argmax(axis=1))
    elif isinstance(released, (WholeRowsClassifier, PrivateClassifier)):  # binary: the probability of label +1
        p = np.reshape(released.predict_y(Xq)[0], -1)
        negative, positive = label_names(card, 2)  # 0 / 1 for a file of dpgp release --classes 2
        predicted = np.where(np.reshape(released.predict_class(Xq), -1) > 0, positive, negative)
        table = table.assign(probability=p, predicted_label=predicted.astype(int))
    else:
        pred = released.predict(Xq)
        values = {"mean": pred.mean, "variance": pred.variance, "noise_std": pred.noise_std}
        if np.ndim(pred.mean) == 2 and np.shape(pred.mean)[1] > 1:  # several --y: one column of each per output
            ys = output_names(card, int(np.shape(pred.mean)[1]))
            table = table.assign(**{f"{k}_{c}": np.asarray(v)[:, p] for k, v in values.items() for p, c in enumerate(ys)})
        else:
            table = table.assign(**{k: np.reshape(v, -1) for k, v in values.items()})
    with StagedFile(out) as file:  # free: nothing to charge
        file.write(lambda tmp: table.to_csv(tmp, index=False))
    if not args.quiet:
        sys.stderr.write(f"wrote {out}: {len(table)} predictions (post-processing: no privacy cost)\n")
    return 0
