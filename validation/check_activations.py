"""Bytes autograd keeps for backward: trainfit's cpu profile against real PyTorch on CPU.

For each model, batch size and input size, the forward pass and loss run under
saved_tensors_hooks (harness.saved_tensor_bytes) and the unique kept storages are summed;
`trainfit summary --device-profile cpu --json` must give the same total within 1%.

    /usr/bin/python3 validation/check_activations.py --trainfit build/release/trainfit
"""
import argparse
import gc

import torch

import lerobot_versions
import torch_models
from harness import Measured, Report, freeze, run_trainfit, saved_tensor_bytes, set_flags, sets_label

TOLERANCE = 0.01

# (model, batch sizes, image sizes or sequence lengths, --set keys, --freeze prefixes)
CASES = [
    ("resnet18", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("resnet50", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("vgg16_bn", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("vit_b_16", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("vgg16", (2,), ((3, 224, 224),), {}, ()),
    ("gpt2", (2,), (64,), {"n_layer": "2", "attention": "eager"}, ()),
    ("resnet18", (2,), ((3, 224, 224),), {}, ("conv1", "bn1", "layer1")),
    ("vit_b_16", (2,), ((3, 160, 160),), {}, ("conv_proj", "encoder.layers.encoder_layer_0")),
]


# LeRobot's policies (model, batch, --set keys): one and three cameras (the README example's), with and
# without the VAE; Diffusion's two presets, one and two cameras.
POLICY_CASES = [
    ("act", 1, {}),
    ("act", 1, {"cameras": "640x360,640x480,640x480"}),
    ("act", 2, {"cameras": "320x240", "use_vae": "false"}),
    ("act", 2, {"cameras": "320x180,320x240,320x240", "use_vae": "false"}),
    ("act", 2, {"cameras": "320x240", "pre_norm": "true", "feedforward_activation": "gelu",
                "state_dim": "0", "env_state_dim": "7"}),
    ("diffusion", 2, {}),
    ("diffusion", 2, {"preset": "classic"}),
    ("diffusion", 2, {"cameras": "96x96,96x96"}),
    ("diffusion", 2, {"preset": "classic", "cameras": "96x96,96x96"}),
    # LeRobot 0.3 (lerobot_versions.py): forward normalises a copy of the raw batch, and the
    # backbones and encoders keep the copies; ACT as 0.4 and 0.5 train it (the masked L1 over
    # every element). Diffusion in 0.4 and 0.5 is 0.6's.
    ("act", 1, {"version": "0.3"}),
    ("act", 1, {"cameras": "640x360,640x480,640x480", "version": "0.3"}),
    ("act", 1, {"version": "0.5"}),
    ("act", 1, {"cameras": "640x360,640x480,640x480", "version": "0.5"}),
    ("diffusion", 2, {"version": "0.3"}),
    ("diffusion", 2, {"preset": "classic", "version": "0.3"}),
]


def amp_backbone_check(report, binary, measured_bytes):
    """Under autocast, ACT's FrozenBatchNorm2d computes x * scale + bias with fp32 buffers, so
    its outputs are fp32 and each conv keeps a bf16 copy besides: the trunk keeps more than in
    fp32, not half. CPU autocast casts convolutions as CUDA autocast does, and the trunk has no
    dropout, so the cuda profile's figure for model.backbone is checked against it here."""

    def measure():
        import torchvision
        from torchvision.models._utils import IntermediateLayerGetter
        from torchvision.ops.misc import FrozenBatchNorm2d
        trunk = IntermediateLayerGetter(torchvision.models.resnet18(norm_layer=FrozenBatchNorm2d),
                                        return_layers={"layer4": "feature_map"})
        image = torch.randn(1, 3, 480, 640)

        def forward():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return trunk(image)["feature_map"].float().sum()

        return saved_tensor_bytes(trunk, forward, exclude=[image])

    measured = measured_bytes.get(["act backbone", "amp-bf16", [1, 3, 480, 640]], measure)
    modules = run_trainfit(binary, ["summary", "--model", "act", "--precision", "amp-bf16",
                                    "--json"])["modules"]
    ours = next(m["kept_bytes"] for m in modules if m["path"] == "model.backbone")
    error = (ours - measured) / measured
    report.check(abs(error) <= TOLERANCE,
                 f"{'act model.backbone amp-bf16 640x480 (CPU autocast)':48s} torch {measured:>13,} "
                 f"trainfit {ours:>13,}  {error:+.4%}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--remeasure", action="store_true", help="measure every case, keeping none")
    args = ap.parse_args()
    torch.manual_seed(0)
    report = Report(f"kept for backward: trainfit --device-profile cpu vs PyTorch {torch.__version__} (CPU)")
    measured_bytes = Measured("activations", __file__, args.remeasure)
    for name, batches, sizes, sets, frozen in CASES:
        for size in sizes:
            for batch in batches:
                sequence = isinstance(size, int)

                def measure():
                    case = torch_models.build(name, batch=batch, image=None if sequence else size,
                                              seq_len=size if sequence else None, sets=sets)
                    freeze(case.model, frozen)
                    return saved_tensor_bytes(case.model, case.loss, exclude=case.batch_tensors())

                measured = measured_bytes.get([name, batch, size, sets, frozen], measure)
                gc.collect()
                flags = ["--seq-len", str(size)] if sequence else ["--input", "x".join(map(str, size))]
                for k, v in sets.items():
                    flags += ["--set", f"{k}={v}"]
                for q in frozen:
                    flags += ["--freeze", q]
                ours = run_trainfit(args.trainfit, ["summary", "--model", name, "--batch", str(batch),
                                                    "--device-profile", "cpu", "--json", "--depth", "0"]
                                    + flags)["activation_bytes"]
                error = (ours - measured) / measured
                label = f"{name} batch {batch} {'seq ' + str(size) if sequence else 'x'.join(map(str, size))}"
                if frozen:
                    label += " frozen " + ",".join(frozen)
                report.check(abs(error) <= TOLERANCE,
                             f"{label:48s} torch {measured:>13,} trainfit {ours:>13,}  {error:+.4%}")
    for name, batch, sets in POLICY_CASES:

        def measure():
            case = lerobot_versions.build(name, batch, sets)
            return saved_tensor_bytes(case.model, case.loss, exclude=case.batch_tensors())

        measured = measured_bytes.get(lerobot_versions.key(name, batch, sets), measure)
        gc.collect()
        flags = set_flags(sets)
        ours = run_trainfit(args.trainfit, ["summary", "--model", name, "--batch", str(batch),
                                            "--device-profile", "cpu", "--json", "--depth", "0"]
                            + flags)["activation_bytes"]
        error = (ours - measured) / measured
        label = f"{name} batch {batch} {sets_label(sets)}"
        report.check(abs(error) <= TOLERANCE,
                     f"{label:48s} torch {measured:>13,} trainfit {ours:>13,}  {error:+.4%}")
    amp_backbone_check(report, args.trainfit, measured_bytes)
    measured_bytes.save(report)
    report.finish()


if __name__ == "__main__":
    main()
