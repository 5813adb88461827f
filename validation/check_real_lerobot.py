"""LeRobot itself (the `lerobot` package from PyPI) training ACT and Diffusion Policy, against
trainfit and against the re-creations the other checks measure (lerobot_reference.py,
lerobot_versions.py).

LeRobot is not a Debian package, so the other checks run re-creations of its policies. This check
takes what the real package measured once, in a virtual environment outside the repository, and
replays it:

    record  (run by a Python with `pip install lerobot`): each case's policy built from LeRobot's
            own config and modeling classes (ACTConfig/ACTPolicy, DiffusionConfig/DiffusionPolicy;
            no pretrained backbone, which would download), trained as LeRobot's loop trains from
            0.4 on (the preprocessor normalises before the step; `loss, _ = policy.forward(batch)`;
            the config's optimizer preset over `get_optim_params()`), and the peak of live tensor
            bytes over two iterations (harness.training_peak). The re-creation of the same
            release (`--set version=`) is measured beside it in the same PyTorch; record fails
            when the two differ. The figures and the versions that made them go to
            validation/measured/real-lerobot.json, beside other releases' (0.4.4 runs on Python
            3.11; 0.5 and later need 3.12).
    replay  (the default; Debian's PyTorch 1.13 is enough): for every kept case,

                trainfit estimate --model act|diffusion --batch B --set ... --device-profile cpu

            must match LeRobot's figure within 2%, as validation/check_peak.py holds the
            re-creations.

    python3.12 -m venv /tmp/lerobot && /tmp/lerobot/bin/pip install 'lerobot[diffusion]==0.6.1'
    /tmp/lerobot/bin/python validation/check_real_lerobot.py record
    /usr/bin/python3 validation/check_real_lerobot.py --trainfit build/release/trainfit
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = os.path.join(HERE, "measured", "real-lerobot.json")
TOLERANCE = 0.02  # as check_peak.py

# (policy, batch, trainfit's --set keys, LeRobot config fields that say the same; the release's
# `--set version=` is added when recording). Diffusion's fields are all given, since its
# defaults changed between releases (0.4: the classic preset without a crop; 0.6: v0.6's).
_CLASSIC = {"horizon": 16, "n_action_steps": 8, "use_group_norm": True,
            "use_separate_rgb_encoder_per_camera": False, "crop_shape": None}
CASES = [
    ("act", 2, {"cameras": "320x240"}, {}),
    ("act", 2, {"cameras": "320x180,320x240,320x240", "chunk_size": "30"},
     {"chunk_size": 30, "n_action_steps": 30}),
    ("act", 2, {"cameras": "320x240", "use_vae": "false"}, {"use_vae": False}),
    ("diffusion", 4, {"preset": "classic", "crop": "none"}, _CLASSIC),
    ("diffusion", 4, {"preset": "classic", "cameras": "96x96,96x96"},
     {**_CLASSIC, "crop_shape": (84, 84)}),
    ("diffusion", 2, {"preset": "v0.6", "cameras": "96x96,96x96", "down_dims": "128,256,512"},
     {"horizon": 64, "n_action_steps": 8, "use_group_norm": False,
      "use_separate_rgb_encoder_per_camera": True, "crop_shape": None,
      "down_dims": (128, 256, 512)}),
]


def case_key(name, batch, sets):
    from harness import sets_label
    return f"{name} b{batch} " + sets_label(dict(sorted(sets.items())))


# ---- record (LeRobot installed) ---------------------------------------------------------------

def real_policy(name, sets, fields):
    """LeRobot's policy for a case, seeded and in training mode, with its optimizer preset."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature

    import lerobot_reference as ref

    if name == "act":
        from lerobot.policies.act.configuration_act import ACTConfig as Config
        from lerobot.policies.act.modeling_act import ACTPolicy as Policy
        c = ref.typed(ref.ACT_DEFAULTS, sets)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig as Config
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy as Policy
        c = ref.diffusion_config(sets)
    inputs = {f"observation.images.cam{i}": PolicyFeature(FeatureType.VISUAL, (3, h, w))
              for i, (w, h) in enumerate(ref.parse_cameras(c["cameras"]))}
    inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (c["state_dim"],))
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (c["action_dim"],))}
    config = Config(input_features=inputs, output_features=outputs, device="cpu",
                    pretrained_backbone_weights=None, **fields)
    torch.manual_seed(0)
    policy = Policy(config)
    policy.train()
    preset = config.get_optimizer_preset()
    return policy, lambda: preset.build(policy.get_optim_params()), c


def record_case(name, batch, sets, fields):
    import torch

    import lerobot_reference as ref
    import lerobot_versions
    from harness import training_peak
    from torch_models import Case

    class Step(torch.nn.Module):
        """LeRobot's training step: the loss of policy.forward(batch)."""

        def __init__(self, policy):
            super().__init__()
            self.policy = policy

        def forward(self, batch):
            loss, _ = self.policy.forward(batch)
            return loss

    policy, optimizer, c = real_policy(name, sets, fields)
    make = (lambda: ref.act_batch(c, batch)) if name == "act" else (
        lambda: ref.diffusion_batch(c, batch))
    real, where = training_peak(Case(Step(policy), [], [], lambda loss: loss,
                                     preset_optimizer=optimizer), "preset", lambda: ([make()], []))
    parameters = sum(p.numel() for p in policy.parameters())
    del policy
    recreation = lerobot_versions.build(name, batch, sets)
    recreated, _ = training_peak(recreation, "preset", recreation.make_batch)
    return {"policy": name, "batch": batch, "sets": sets, "parameters": parameters,
            "lerobot_peak": real, "peak_at": list(where), "recreation_peak": recreated}


def record(args):
    from importlib.metadata import version

    import torch

    from harness import Report

    versions = {"lerobot": version("lerobot"), "torch": torch.__version__,
                "torchvision": version("torchvision")}
    release = ".".join(versions["lerobot"].split(".")[:2])  # trainfit's --set version=
    torch.set_num_threads(args.threads)
    report = Report(f"LeRobot {versions['lerobot']} under PyTorch {versions['torch']} (CPU) "
                    "against its re-creation, to the byte")
    cases = {}
    for name, batch, sets, fields in CASES:
        sets = {**sets, "version": release}
        start = time.monotonic()
        entry = record_case(name, batch, sets, fields)
        cases[case_key(name, batch, sets)] = entry
        report.check(entry["lerobot_peak"] == entry["recreation_peak"],
                     f"{case_key(name, batch, sets):60s} LeRobot {entry['lerobot_peak']:>14,} "
                     f"re-creation {entry['recreation_peak']:>14,} "
                     f"({time.monotonic() - start:.0f} s)")
    # Each release's figures replace that release's alone.
    try:
        with open(args.kept) as f:
            releases = json.load(f)["releases"]
    except (OSError, ValueError, KeyError, TypeError):
        releases = {}
    releases[versions["lerobot"]] = {**versions, "cases": cases}
    with open(args.kept, "w") as f:
        json.dump({"releases": releases}, f, indent=1, sort_keys=True)
        f.write("\n")
    report.show(f"wrote {os.path.relpath(args.kept)}: {len(cases)} cases")
    report.finish()


# ---- replay (Debian's PyTorch 1.13) ---------------------------------------------------------

def replay(args):
    from harness import Report, run_trainfit, set_flags

    try:
        with open(args.kept) as f:
            releases = json.load(f)["releases"]
        if not isinstance(releases, dict) or not releases or not all(
                isinstance(r.get("cases"), dict) and r["cases"] for r in releases.values()):
            raise ValueError("no cases")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"error: {os.path.relpath(args.kept)} cannot be read ({e}); hint: record it with "
              "LeRobot installed (see this script's header)", file=sys.stderr)
        sys.exit(2)
    report = Report(f"LeRobot {', '.join(sorted(releases))} (PyPI) on CPU, kept in "
                    f"{os.path.relpath(args.kept)}: trainfit estimate --device-profile cpu "
                    f"within {TOLERANCE:.0%}")
    for release, data in sorted(releases.items()):
        report.show(f"LeRobot {release} under PyTorch {data['torch']}")
        for label, entry in sorted(data["cases"].items()):
            predicted = run_trainfit(args.trainfit, [
                "estimate", "--model", entry["policy"], "--batch", str(entry["batch"]),
                "--device-profile", "cpu", "--json"] + set_flags(entry["sets"]))
            predicted = predicted["peak_allocated_bytes"]
            measured = entry["lerobot_peak"]
            error = (predicted - measured) / measured
            report.check(abs(error) <= TOLERANCE,
                         f"{label:60s} LeRobot {measured:>14,} trainfit {predicted:>14,} "
                         f"{predicted - measured:+,} bytes ({error:+.4%}); the re-creation "
                         f"measured {entry['recreation_peak'] - measured:+,} bytes from LeRobot")
    report.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", choices=("replay", "record"), default="replay")
    ap.add_argument("--trainfit", help="the trainfit binary (replay)")
    ap.add_argument("--kept", default=KEPT, help="the kept figures (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="record: PyTorch's threads")
    args = ap.parse_args()
    if args.mode == "record":
        record(args)
    elif not args.trainfit:
        ap.error("replay needs --trainfit")
    else:
        replay(args)


if __name__ == "__main__":
    main()
