"""Parameter counts: trainfit equals PyTorch exactly for every zoo model.

torchvision models are built with torchvision; GPT-2 sizes are checked against the published
counts (124,439,808 for gpt2) and against our reference re-creation.

    /usr/bin/python3 validation/check_params.py --trainfit build/release/trainfit
"""
import argparse
import gc

import torch_models
from harness import Measured, Report, parameter_counts, run_trainfit, set_flags, sets_label

PUBLISHED_GPT2 = {"gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080}
# LeRobot's policies and their expected counts: ACT's (14/14 and 6/6) and PushT Diffusion's are
# what LeRobot's training logs print; 293,174,382 follows from the UNet's closed form for 14/14
# with three cameras and an encoder each; None: only the re-creation to compare with.
LEROBOT = [
    ("act", {}, 51_613_582),
    ("act", {"state_dim": "6", "action_dim": "6"}, 51_597_190),
    ("act", {"cameras": "640x360,640x480,640x480"}, 51_613_582),
    ("act", {"use_vae": "false", "vision_backbone": "resnet34"}, None),
    ("diffusion", {}, 262_709_026),
    ("diffusion", {"preset": "classic"}, 262_709_026),
    ("diffusion", {"state_dim": "14", "action_dim": "14", "cameras": "96x96,96x96,96x96"}, 293_174_382),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--remeasure", action="store_true", help="count every model, keeping none")
    args = ap.parse_args()
    report = Report("parameter counts: trainfit vs PyTorch")
    counts = Measured("params", __file__, args.remeasure)

    def count(key, **build):
        def measure():
            case = torch_models.build(key[0], **build)
            result = parameter_counts(case.model)
            del case
            gc.collect()
            return result
        return counts.get(list(key), measure)

    for name in torch_models.TORCHVISION + list(PUBLISHED_GPT2):
        seq = ["--seq-len", "8"] if name.startswith("gpt2") else []
        ours = run_trainfit(args.trainfit, ["summary", "--model", name, "--json", "--depth", "0"] + seq)
        total, trainable = count((name, 8), seq_len=8)
        report.check(ours["parameters"] == total and ours["trainable_parameters"] == trainable,
                     f"{name:12s} torch {total:>12,} trainable {trainable:>12,}  "
                     f"trainfit {ours['parameters']:>12,} trainable {ours['trainable_parameters']:>12,}")
        if name in PUBLISHED_GPT2:
            report.check(ours["parameters"] == PUBLISHED_GPT2[name],
                         f"{name:12s} published {PUBLISHED_GPT2[name]:,}")
    for name, sets, published in LEROBOT:
        flags = set_flags(sets)
        ours = run_trainfit(args.trainfit, ["summary", "--model", name, "--json", "--depth", "0"] + flags)
        total, trainable = count((name, sets), sets=sets)
        label = f"{name} {sets_label(sets)}"
        report.check(ours["parameters"] == total and ours["trainable_parameters"] == trainable,
                     f"{label:60s} torch {total:>12,} trainfit {ours['parameters']:>12,}")
        if published is not None:
            report.check(ours["parameters"] == published, f"{label:60s} expected {published:,}")
    # A --set key and a non-default image size change the counts the same way in both.
    ours = run_trainfit(args.trainfit, ["summary", "--model", "vit_b_16", "--input", "3x384x384",
                                        "--set", "num_classes=10", "--json", "--depth", "0"])
    total, _ = count(("vit_b_16", (3, 384, 384), {"num_classes": 10}), image=(3, 384, 384),
                     sets={"num_classes": 10})
    report.check(ours["parameters"] == total,
                 f"vit_b_16 384x384 num_classes=10: torch {total:,} trainfit {ours['parameters']:,}")
    counts.save(report)
    report.finish()


if __name__ == "__main__":
    main()
