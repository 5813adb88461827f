"""Learning-rate schedules: trainfit equals torch.optim.lr_scheduler, value for value.

Every case below is built in PyTorch from the same Python call that `trainfit schedule
--scheduler` is given, stepped as a training loop steps it (optimizer.step(), then
scheduler.step()), and param_groups[g]["lr"] is read before each step. trainfit must give every
value to 1e-12 relative. ReduceLROnPlateau and note 004's EarlyStopping are replayed on
validation curves recorded from a small training run (tests/data/schedules/*.csv).

PyTorch's values are committed (tests/data/schedules/torch_lr.json) so that the unit tests
compare without PyTorch; this script checks that file against PyTorch too.

    /usr/bin/python3 validation/check_schedules.py --trainfit build/dev/trainfit
    /usr/bin/python3 validation/check_schedules.py --trainfit build/dev/trainfit --record
"""
import argparse
import csv
import functools
import json
import math
import os
import warnings

import numpy as np
import torch
from torch.optim import lr_scheduler

from harness import Report, run_trainfit

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "schedules")
RECORDED = os.path.join(DATA, "torch_lr.json")
RELATIVE = 1e-12

# (scheduler as written, --lr values, --epochs, --steps-per-epoch or None)
CASES = [
    ("StepLR(step_size=30)", [0.1], 100, None),
    ("StepLR(step_size=2, gamma=0.7)", [0.01], 30, None),  # note 004
    ("MultiStepLR(milestones=[30, 80], gamma=0.1)", [0.1], 100, None),  # note 004
    ("MultiStepLR(milestones=[5, 10, 15], gamma=0.5)", [0.1, 0.01], 20, None),
    ("ExponentialLR(gamma=0.95)", [0.1], 100, None),
    ("ConstantLR(factor=0.5, total_iters=4)", [0.1], 10, None),
    ("LinearLR(start_factor=0.1, total_iters=10)", [0.1], 20, None),
    ("LinearLR(start_factor=0.5, end_factor=0.1, total_iters=30)", [0.2], 40, None),
    ("PolynomialLR(total_iters=20, power=2.0)", [0.1], 25, None),
    ("CosineAnnealingLR(T_max=100, eta_min=1e-6)", [0.1], 100, None),  # note 004
    ("CosineAnnealingLR(T_max=10)", [0.1], 45, None),  # past T_max: it rises again
    ("CosineAnnealingLR(T_max=50, eta_min=1e-5)", [0.1, 0.05, 0.001], 120, None),
    ("CosineAnnealingLR(T_max=5000)", [0.001], 5, 1000),  # 5000 chained steps
    ("CosineAnnealingWarmRestarts(T_0=50, T_mult=2, eta_min=1e-6)", [0.1], 350, None),  # note 004
    ("CosineAnnealingWarmRestarts(T_0=10)", [0.1], 35, None),
    ("CosineAnnealingWarmRestarts(T_0=3, T_mult=3, eta_min=0.001)", [0.1], 4, 10),
    ("OneCycleLR(max_lr=0.01)", [0.1], 10, 39),
    ("OneCycleLR(max_lr=0.1, total_steps=100, three_phase=True)", [0.1], 100, None),
    ("OneCycleLR(max_lr=[0.01, 0.001], epochs=5, steps_per_epoch=20, anneal_strategy='linear', "
     "pct_start=0.25)", [0.1, 0.1], 5, 20),
    ("CyclicLR(base_lr=0.001, max_lr=0.1, step_size_up=5, mode='triangular2')", [0.1], 40, None),
    ("CyclicLR(base_lr=0.001, max_lr=0.1, step_size_up=4, step_size_down=6, mode='exp_range', "
     "gamma=0.95)", [0.1], 50, None),
    ("SequentialLR(schedulers=[LinearLR(start_factor=0.01, total_iters=5), "
     "CosineAnnealingLR(T_max=95)], milestones=[5])", [0.1], 100, None),
    ("SequentialLR(schedulers=[ConstantLR(factor=0.1, total_iters=2), ExponentialLR(gamma=0.9)], "
     "milestones=[2])", [0.1], 30, None),
    ("SequentialLR(schedulers=[LinearLR(start_factor=0.001, total_iters=500), "
     "CosineAnnealingWarmRestarts(T_0=1000, T_mult=2)], milestones=[500])", [3e-4], 8, 500),
    ("SequentialLR(schedulers=[ConstantLR(factor=0.5, total_iters=3), StepLR(step_size=5, "
     "gamma=0.5), MultiStepLR(milestones=[10], gamma=0.1)], milestones=[3, 20])", [0.1, 0.2], 40, None),
    ("SequentialLR(schedulers=[LinearWarmupScheduler(warmup_steps=5), MultiStepLR(milestones=[20], "
     "gamma=0.1)], milestones=[5])", [0.05], 30, None),
    ("LinearWarmupScheduler(warmup_steps=1000)", [0.001], 3, 500),  # note 004
    ("ChainedScheduler(schedulers=[ConstantLR(factor=0.1, total_iters=2), ExponentialLR(gamma=0.9)])",
     [0.1], 20, None),
]

# (scheduler, --lr, metrics file, --column, early-stopping settings or None)
PLATEAU_CASES = [
    ("ReduceLROnPlateau(mode='min', factor=0.5, patience=10, threshold=1e-4, min_lr=1e-6)", [0.001],
     "lightning_metrics.csv", "val_loss", {"patience": 10, "min_delta": 0.001, "mode": "min"}),
    ("ReduceLROnPlateau(mode='max', factor=0.2, patience=2, threshold=0.01, threshold_mode='abs', "
     "cooldown=3)", [0.1], "tensorboard_val_acc.csv", None, {"patience": 5, "min_delta": 0, "mode": "max"}),
    ("ReduceLROnPlateau(factor=0.1, patience=0, min_lr=[1e-4, 1e-5])", [0.01, 0.001],
     "lightning_metrics.csv", "val_loss", None),
    ("ReduceLROnPlateau(patience=3, threshold=0.05, threshold_mode='rel', cooldown=2)", [0.1],
     "val_loss.csv", None, {"patience": 3, "min_delta": 0.0005, "mode": "min"}),
    ("CosineAnnealingLR(T_max=60)", [0.1], "val_loss.csv", None, {"patience": 8, "min_delta": 0, "mode": "min"}),
]


class LinearWarmupScheduler(lr_scheduler._LRScheduler):
    """Note 004's warm-up, as written there."""

    def __init__(self, optimizer, warmup_steps, last_epoch=-1):
        self.warmup_steps = warmup_steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch < self.warmup_steps:
            return [base_lr * min(1.0, self.last_epoch / self.warmup_steps) for base_lr in self.base_lrs]
        return self.base_lrs


class EarlyStopping:
    """Note 004's EarlyStopping, as written there (the epoch it reads is the loop's)."""

    def __init__(self, patience=10, min_delta=0, mode='min', restore_best_weights=True):
        self.patience = patience
        self.min_delta = min_delta
        self.mode = mode
        self.restore_best_weights = restore_best_weights
        self.counter = 0
        self.best_value = np.Inf if mode == 'min' else -np.Inf
        self.best_weights = None
        self.stopped_epoch = 0

    def __call__(self, current_value, model):
        if self.mode == 'min':
            is_better = current_value < (self.best_value - self.min_delta)
        else:
            is_better = current_value > (self.best_value + self.min_delta)
        if is_better:
            self.best_value = current_value
            self.counter = 0
            self.best_weights = {k: v.cpu().clone() for k, v in model.state_dict().items()}
        else:
            self.counter += 1
            if self.counter >= self.patience:
                self.stopped_epoch = epoch
                if self.restore_best_weights and self.best_weights is not None:
                    model.load_state_dict(self.best_weights)
                return True
        return False


epoch = 0  # read by EarlyStopping, as in note 004


def optimizer_with(lrs):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs]
    return torch.optim.SGD(groups, lr=lrs[0], momentum=0.9)


def build(spec, optimizer):
    names = {name: functools.partial(getattr(lr_scheduler, name), optimizer)
             for name in ("StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
                          "PolynomialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
                          "OneCycleLR", "CyclicLR", "SequentialLR", "ReduceLROnPlateau")}
    names["LinearWarmupScheduler"] = functools.partial(LinearWarmupScheduler, optimizer)
    names["ChainedScheduler"] = lr_scheduler.ChainedScheduler
    return eval(spec, {"__builtins__": {}}, names)  # the cases above, nothing from outside


def torch_schedule(spec, lrs, steps):
    if spec.startswith("OneCycleLR(") and "total_steps" not in spec and "epochs" not in spec:
        # trainfit's default: the run's steps
        spec = spec.replace("OneCycleLR(", f"OneCycleLR(total_steps={steps}, ", 1)
    optimizer = optimizer_with(lrs)
    scheduler = build(spec, optimizer)
    values = [[] for _ in lrs]
    for i in range(steps):
        for g, group in enumerate(optimizer.param_groups):
            values[g].append(group["lr"])
        if i + 1 < steps:
            optimizer.step()
            scheduler.step()
    return values


def read_metric(path, column):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    column = column or ("Value" if "Value" in rows[0] else list(rows[0])[-1])
    return [float(r[column]) for r in rows if r[column] != ""]


def torch_plateau(spec, lrs, metrics, stopping):
    global epoch
    optimizer = optimizer_with(lrs)
    scheduler = build(spec, optimizer)
    plateau = isinstance(scheduler, lr_scheduler.ReduceLROnPlateau)
    stopper = EarlyStopping(**stopping) if stopping else None
    model = torch.nn.Linear(1, 1)
    values = [[] for _ in lrs]
    stopped, best_epoch, best = None, -1, math.inf
    for epoch, m in enumerate(metrics):
        for g, group in enumerate(optimizer.param_groups):
            values[g].append(group["lr"])
        optimizer.step()
        if stopper and stopped is None:
            before = stopper.best_value
            if stopper(m, model):
                stopped = stopper.stopped_epoch
            if stopper.best_value != before:
                best_epoch, best = epoch, stopper.best_value
        if epoch + 1 < len(metrics) or plateau:
            scheduler.step(m) if plateau else scheduler.step()
    result = {"lr_groups": values}
    if stopper:
        result.update(stopped_epoch=stopped, best_epoch=best_epoch, best_value=best)
    return result


def record_curves():
    """Trains a small classifier on CPU for 60 epochs; writes its validation curve three ways."""
    torch.manual_seed(0)
    x = torch.randn(1200, 20)
    w = torch.randn(20, 4)
    y = (x @ w + 0.8 * torch.randn(1200, 4)).argmax(1)
    model = torch.nn.Sequential(torch.nn.Linear(20, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rows, step = [], 0
    for e in range(60):
        for i in range(0, 800, 50):
            loss = torch.nn.functional.cross_entropy(model(x[i:i + 50]), y[i:i + 50])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        with torch.no_grad():
            out = model(x[800:])
            val_loss = torch.nn.functional.cross_entropy(out, y[800:]).item()
            val_acc = (out.argmax(1) == y[800:]).float().mean().item()
        rows.append((e, step, loss.item(), val_loss, val_acc))
    with open(os.path.join(DATA, "lightning_metrics.csv"), "w") as f:
        f.write("epoch,step,train_loss,val_loss,val_acc\n")
        for e, s, train, vl, va in rows:
            f.write(f"{e},{s - 1},{train!r},,\n{e},{s - 1},,{vl!r},{va!r}\n")
    with open(os.path.join(DATA, "tensorboard_val_acc.csv"), "w") as f:
        f.write("Wall time,Step,Value\n")
        for e, s, _, _, va in rows:
            f.write(f"{1700000000.0 + 12.5 * e!r},{s - 1},{va!r}\n")
    with open(os.path.join(DATA, "val_loss.csv"), "w") as f:
        f.write("val_loss\n")
        for row in rows:
            f.write(f"{row[3]!r}\n")


def cli_args(spec, lrs, epochs, steps_per_epoch):
    args = ["schedule", "--scheduler", spec, "--lr", ",".join(repr(lr) for lr in lrs), "--json"]
    if epochs:
        args += ["--epochs", str(epochs)]
    if steps_per_epoch:
        args += ["--steps-per-epoch", str(steps_per_epoch)]
    return args


def worst_relative(ours, theirs):
    worst = 0.0
    for a_group, b_group in zip(ours, theirs):
        if len(a_group) != len(b_group):
            return math.inf
        for a, b in zip(a_group, b_group):
            if a != b:
                worst = max(worst, abs(a - b) / max(abs(b), 1e-300))
    return worst


def main():
    # SequentialLR steps a scheduler with step(0) at a milestone, which PyTorch warns about.
    warnings.filterwarnings("ignore", message="The epoch parameter", category=UserWarning)
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--record", action="store_true",
                    help="rewrite tests/data/schedules/torch_lr.json (and the curves, if missing)")
    args = ap.parse_args()
    report = Report("learning-rate schedules: trainfit vs torch.optim.lr_scheduler")
    if args.record and not os.path.exists(os.path.join(DATA, "val_loss.csv")):
        record_curves()

    recorded = []
    for spec, lrs, epochs, steps_per_epoch in CASES:
        steps = epochs * (steps_per_epoch or 1)
        theirs = torch_schedule(spec, lrs, steps)
        cli = cli_args(spec, lrs, epochs, steps_per_epoch)
        ours = run_trainfit(args.trainfit, cli)
        ours_groups = ours.get("lr_groups", [ours["lr"]])
        worst = worst_relative(ours_groups, theirs)
        report.check(worst <= RELATIVE, f"{spec[:88]:88s} {steps:5d} steps, worst relative {worst:.1e}")
        recorded.append({"args": cli, "lr_groups": theirs})

    for spec, lrs, csv_name, column, stopping in PLATEAU_CASES:
        path = os.path.join(DATA, csv_name)
        metrics = read_metric(path, column)
        theirs = torch_plateau(spec, lrs, metrics, stopping)
        cli = cli_args(spec, lrs, None, None) + ["--metrics", "{data}/schedules/" + csv_name]
        if column:
            cli += ["--column", column]
        for key, value in (stopping or {}).items():
            cli += ["--early-stopping", f"{key}={value}"]
        ours = run_trainfit(args.trainfit, [a.replace("{data}", os.path.join(DATA, "..")) for a in cli])
        worst = worst_relative(ours.get("lr_groups", [ours["lr"]]), theirs["lr_groups"])
        label = f"{spec[:60]:60s} on {csv_name}"
        report.check(worst <= RELATIVE, f"{label} lr, worst relative {worst:.1e}")
        if stopping:
            same = all(ours[k] == theirs[k] for k in ("stopped_epoch", "best_epoch", "best_value"))
            report.check(same, f"{label} early stopping: stops at {theirs['stopped_epoch']}, best "
                               f"epoch {theirs['best_epoch']}; trainfit {ours['stopped_epoch']}, "
                               f"{ours['best_epoch']}")
            for row in ours["early_stopping"]["patience_sweep"]:
                sweep = torch_plateau(spec, lrs, metrics, dict(stopping, patience=row["patience"]))
                report.check(row["stopped_epoch"] == sweep["stopped_epoch"] and
                             row["best_epoch"] == sweep["best_epoch"],
                             f"{label} early stopping with patience {row['patience']}: "
                             f"{sweep['stopped_epoch']}")
        recorded.append({"args": cli, **theirs})

    if args.record:
        with open(RECORDED, "w") as f:
            json.dump({"torch": torch.__version__, "cases": recorded}, f, separators=(",", ":"))
            f.write("\n")
    with open(RECORDED) as f:
        committed = json.load(f)["cases"]
    report.check(committed == recorded,
                 f"{os.path.relpath(RECORDED)} holds PyTorch's values for all {len(recorded)} cases")
    report.finish()


if __name__ == "__main__":
    main()
