"""``dpgp budget init|show`` (the ledger, without TensorFlow) and ``dpgp demo``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..__main__ import import_tensorflow_quietly, run_demo
from .common import COMPOSITIONS, UsageError, checked_output, checked_privacy

if TYPE_CHECKING:
    from ..accounting import PrivacyAccountant

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


def cmd_budget_init(args) -> int:
    from ..accounting import PrivacyAccountant

    path = checked_output(Path(args.file), force=None)  # never over an existing file (no --force here)
    epsilon, delta = checked_privacy(args.epsilon, args.delta)
    if args.composition not in COMPOSITIONS:
        raise UsageError(f"--composition must be one of {COMPOSITIONS}")
    PrivacyAccountant(epsilon=epsilon, delta=delta, composition=args.composition, ledger=path)
    print(f"created {path}: budget (epsilon={epsilon}, delta={delta}), {args.composition} composition")
    return 0


def cmd_budget_show(args) -> int:
    from ..accounting import PrivacyAccountant

    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"{path}: no ledger there")
    acc = PrivacyAccountant.open(path)
    eps, dlt = acc.spent
    rem_eps, rem_dlt = acc.remaining
    print(f"ledger {path}: budget (epsilon={acc.epsilon}, delta={acc.delta}), {acc.composition} composition")
    print(f"spent (basic): epsilon={eps:.6g}, delta={dlt:.6g}; remaining (basic): epsilon={rem_eps:.6g}, delta={rem_dlt:.6g}")
    held_eps, held_dlt = acc.held
    if held_eps > 0.0 or held_dlt > 0.0:
        print(f"held by releases under way or by processes that died mid-release (counted as spent): "
              f"epsilon={held_eps:.6g}, delta={held_dlt:.6g}")
    if acc.composition != "basic":
        print(f"spent ({acc.composition}): epsilon={acc.epsilon_spent():.6g} at delta={acc.delta}")
    for row in acc.history():
        print("  " + ", ".join(f"{k}={row[k]}" for k in row))
    return 0


def cmd_demo(args) -> int:
    epsilon, delta = checked_privacy(args.epsilon, args.delta)
    for name, value in (("--split-seed", args.split_seed), ("--seed", args.seed)):
        if value is not None and value < 0:
            raise UsageError(f"{name} must be >= 0, got {value}")
    import_tensorflow_quietly()
    run_demo(epsilon, delta, Path(args.output), args.split_seed, args.seed)
    return 0
