"""Peak memory of training: trainfit's cpu profile against real PyTorch on CPU.

Each case trains two iterations (forward, loss, backward, optimizer.step,
zero_grad(set_to_none=True)) under a dispatch mode that sums live tensor storages after every
aten op (harness.training_peak); `trainfit estimate --device-profile cpu --json` must give the
same peak within 2%.

    /usr/bin/python3 validation/check_peak.py --trainfit build/release/trainfit [--quick]
"""
import argparse
import gc

import torch

import lerobot_versions
import torch_models
from harness import (Measured, Report, checkpoint_modules, freeze, make_optimizer, run_trainfit,
                     set_flags, sets_label, training_peak)

TOLERANCE = 0.02
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")

# (model, batch sizes, CxHxW, optimizers, --freeze prefixes, --checkpoint patterns)
CASES = [
    ("resnet18", (1, 4), (3, 128, 128), OPTIMIZERS, (), ()),
    ("resnet50", (1, 4), (3, 128, 128), OPTIMIZERS, (), ()),
    # The VGGs are the slowest to run on CPU (138 M parameters): one configuration each.
    ("vgg16", (2,), (3, 128, 128), ("momentum",), (), ()),
    ("vgg16_bn", (2,), (3, 128, 128), ("adamw",), (), ()),
    ("vit_b_16", (1, 2), (3, 128, 128), OPTIMIZERS, (), ()),
    ("resnet50", (4,), (3, 128, 128), ("adamw",), ("conv1", "bn1", "layer1", "layer2"), ()),
    ("resnet50", (4,), (3, 128, 128), ("adam",), (), ("layer1.*", "layer2.*", "layer3.*")),
    ("vit_b_16", (4,), (3, 128, 128), ("sgd",), (), ("encoder.layers.*.mlp",)),
]

# zero_grad(set_to_none=False), 1.x's default and many older scripts' (--no-zero-grad-set-to-none):
# (model, batch, CxHxW, optimizer).
class KeptGrads:
    """An optimizer whose zero_grad zeroes the gradients in place (set_to_none=False), whatever
    the training loop asks."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self):
        self.optimizer.step()

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=False)


KEPT_GRAD_CASES = [
    ("resnet18", 4, (3, 128, 128), "adamw"),
    ("resnet50", 2, (3, 128, 128), "sgd"),
    ("vit_b_16", 2, (3, 128, 128), "adam"),
]


# LeRobot's policies (model, batch, --set keys), trained with their own optimizer preset
# (ACT: AdamW, weight decay 1e-4, backbone group; Diffusion: Adam, weight decay 1e-6).
POLICY_CASES = [
    ("act", 1, {"cameras": "320x240"}),
    ("act", 1, {"cameras": "320x240", "use_vae": "false"}),
    ("act", 1, {"cameras": "320x180,320x240,320x240"}),
    ("act", 1, {"cameras": "320x180,320x240,320x240", "use_vae": "false"}),
    ("diffusion", 2, {}),
    ("diffusion", 2, {"preset": "classic", "cameras": "96x96,96x96"}),
    # Earlier LeRobot releases (lerobot_versions.py): in 0.3 the loop holds the raw batch while
    # forward normalises a copy; up to 0.5 ACT averages its masked L1 over every element. Each
    # peaks in the backward, where ACT's backbones still keep the normalised images (0.3 peaks
    # 0.3% and 0.4% above 0.6 here); Diffusion's copies are gone by then (a smaller UNet, so
    # that the peak is not the optimizer's).
    ("act", 1, {"cameras": "320x180,320x240,320x240", "use_vae": "false", "version": "0.3"}),
    ("act", 1, {"cameras": "320x180,320x240,320x240", "use_vae": "false", "version": "0.5"}),
    ("act", 4, {"cameras": "320x240", "version": "0.3"}),
    ("act", 4, {"cameras": "320x240", "version": "0.5"}),
    ("diffusion", 2, {"cameras": "160x120", "down_dims": "64,128,256", "version": "0.3"}),
    ("diffusion", 4, {"preset": "classic", "cameras": "320x240,320x240", "down_dims": "64,128,256",
                      "version": "0.3"}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--quick", action="store_true", help="only the first optimizer of each case")
    ap.add_argument("--remeasure", action="store_true", help="measure every case, keeping none")
    args = ap.parse_args()
    report = Report(f"training peak: trainfit estimate --device-profile cpu vs PyTorch {torch.__version__} (CPU)")
    measured_peaks = Measured("peak", __file__, args.remeasure)
    for name, batches, image, optimizers, frozen, checkpoint in CASES:
        for batch in batches:
            for optimizer in optimizers[:1] if args.quick else optimizers:

                def measure():
                    case = torch_models.build(name, batch=batch, image=image)
                    freeze(case.model, frozen)
                    checkpoint_modules(case.model, checkpoint)

                    def make_batch():
                        return [torch.randn(batch, *image)], [torch.randint(0, 1000, (batch,))]

                    return training_peak(case, optimizer, make_batch)

                measured, where = measured_peaks.get(
                    [name, batch, image, optimizer, frozen, checkpoint], measure)
                gc.collect()
                flags = ["--input", "x".join(map(str, image)), "--optimizer", optimizer]
                for q in frozen:
                    flags += ["--freeze", q]
                for q in checkpoint:
                    flags += ["--checkpoint", q]
                ours = run_trainfit(args.trainfit, ["estimate", "--model", name, "--batch", str(batch),
                                                    "--device-profile", "cpu", "--json"] + flags)
                predicted = ours["peak_allocated_bytes"]
                error = (predicted - measured) / measured
                label = f"{name} b{batch} {optimizer}"
                if frozen:
                    label += " freeze " + ",".join(frozen)
                if checkpoint:
                    label += " ckpt " + ",".join(checkpoint)
                report.check(abs(error) <= TOLERANCE,
                             f"{label:52s} torch {measured:>12,} ({where[0]} {where[1]}) trainfit "
                             f"{predicted:>12,} ({ours['peak_phase']} {ours['peak_iteration']}) {error:+.3%}")
    for name, batch, image, optimizer in KEPT_GRAD_CASES[:1] if args.quick else KEPT_GRAD_CASES:

        def measure():
            case = torch_models.build(name, batch=batch, image=image)
            params = [p for p in case.model.parameters() if p.requires_grad]
            case.preset_optimizer = lambda: KeptGrads(make_optimizer(optimizer, params))

            def make_batch():
                return [torch.randn(batch, *image)], [torch.randint(0, 1000, (batch,))]

            return training_peak(case, "preset", make_batch)

        measured, where = measured_peaks.get(
            [name, batch, image, optimizer, "zero_grad(set_to_none=False)"], measure)
        gc.collect()
        ours = run_trainfit(args.trainfit, [
            "estimate", "--model", name, "--batch", str(batch), "--device-profile", "cpu",
            "--input", "x".join(map(str, image)), "--optimizer", optimizer,
            "--no-zero-grad-set-to-none", "--json"])
        predicted = ours["peak_allocated_bytes"]
        error = (predicted - measured) / measured
        label = f"{name} b{batch} {optimizer} set_to_none=False"
        report.check(abs(error) <= TOLERANCE,
                     f"{label:52s} torch {measured:>12,} ({where[0]} {where[1]}) trainfit "
                     f"{predicted:>12,} ({ours['peak_phase']} {ours['peak_iteration']}) {error:+.3%}")
    for name, batch, sets in POLICY_CASES[:2] if args.quick else POLICY_CASES:

        def measure():
            case = lerobot_versions.build(name, batch, sets)
            return training_peak(case, "preset", case.make_batch)

        measured, where = measured_peaks.get(lerobot_versions.key(name, batch, sets), measure)
        gc.collect()
        flags = set_flags(sets)
        ours = run_trainfit(args.trainfit, ["estimate", "--model", name, "--batch", str(batch),
                                            "--device-profile", "cpu", "--json"] + flags)
        predicted = ours["peak_allocated_bytes"]
        error = (predicted - measured) / measured
        label = f"{name} b{batch} {ours['optimizer']} {sets_label(sets)}"
        report.check(abs(error) <= TOLERANCE,
                     f"{label:52s} torch {measured:>12,} ({where[0]} {where[1]}) trainfit "
                     f"{predicted:>12,} ({ours['peak_phase']} {ours['peak_iteration']}) {error:+.3%}")
    measured_peaks.save(report)
    report.finish()


if __name__ == "__main__":
    main()
