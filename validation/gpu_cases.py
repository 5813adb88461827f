"""GPU validation: measure real CUDA training memory, record it, and compare trainfit with it.

On a machine with an NVIDIA GPU and CUDA PyTorch (with torchvision):

    python3 validation/gpu_cases.py measure            # writes validation/gpu_results/<gpu>.json
    python3 validation/gpu_cases.py measure --time     # and each case's step time

Anywhere (this is what the test suite runs; it is skipped while no results are recorded):

    /usr/bin/python3 validation/gpu_cases.py compare --trainfit build/release/trainfit

Each case runs in a fresh Python process so that cached blocks, cuBLAS workspaces and the CUDA
context of one case do not leak into the next: two training iterations (forward and loss,
backward, optimizer.step, zero_grad(set_to_none=True)), then torch.cuda.max_memory_allocated(),
max_memory_reserved(), and the memory the device reports in use (total - free). With --time,
then 5 warm-up steps and the median of 20 synchronised ones; compare checks a recorded step
time against the catalog's card (10%) and the card's calibration profile beside the results (8%).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "gpu_results")
SKIPPED = 77  # ctest's SKIP_RETURN_CODE

# id, model, batch, image, precision, optimizer, --freeze, --checkpoint
CASES = []
for model in ("resnet18", "resnet50", "vgg16", "vgg16_bn", "vit_b_16"):
    for batch in (8, 32):
        for optimizer in ("sgd", "momentum", "adam", "adamw"):
            CASES.append((f"{model}-b{batch}-{optimizer}", model, batch, 224, "fp32", optimizer, (), ()))
for model in ("resnet50", "vit_b_16"):
    for precision in ("amp-fp16", "amp-bf16"):
        CASES.append((f"{model}-b32-adamw-{precision}", model, 32, 224, precision, "adamw", (), ()))
CASES.append(("resnet50-b32-adamw-freeze", "resnet50", 32, 224, "fp32", "adamw",
              ("conv1", "bn1", "layer1", "layer2"), ()))
CASES.append(("resnet50-b32-adam-checkpoint", "resnet50", 32, 224, "fp32", "adam", (),
              ("layer1.*", "layer2.*", "layer3.*")))

RUN_ONE = r'''
import json, statistics, sys, time, torch, torchvision
sys.path.insert(0, {here!r})
from harness import make_optimizer, checkpoint_modules
model_name, batch, image, precision, optimizer, frozen, checkpoint = {args!r}
timed = {timed!r}
dev = torch.device("cuda")
torch.manual_seed(0)
model = getattr(torchvision.models, model_name)().to(dev).train()
for name, p in model.named_parameters():
    if any(name == q or name.startswith(q + ".") for q in frozen):
        p.requires_grad_(False)
checkpoint_modules(model, checkpoint)
opt = make_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
amp = {{"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}}.get(precision)
scaler = torch.cuda.amp.GradScaler() if amp == torch.float16 else None
def step():
    x = torch.randn(batch, 3, image, image, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
    if scaler:
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    else:
        loss.backward(); opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.reset_peak_memory_stats()
for _ in range(2):
    step()
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
result = {{"max_memory_allocated": torch.cuda.max_memory_allocated(),
          "max_memory_reserved": torch.cuda.max_memory_reserved(),
          "device_used": total - free}}
if timed:  # after the memory figures: 5 warm-up steps, then the median of 20 synchronised ones
    for _ in range(5):
        step()
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    result["step_time_s"] = statistics.median(times)
print(json.dumps(result))
'''


def trainfit_args(case):
    _, model, batch, image, precision, optimizer, frozen, checkpoint = case
    args = ["--model", model, "--batch", str(batch), "--input", f"3x{image}x{image}",
            "--precision", precision, "--optimizer", optimizer]
    for q in frozen:
        args += ["--freeze", q]
    for q in checkpoint:
        args += ["--checkpoint", q]
    return args


def device_info(torch):
    """The card and the software a recording was made with."""
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "total_bytes": props.total_memory,
            "sm": props.major * 10 + props.minor, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}


def measure(args):
    import torch
    device = device_info(torch)
    results = []
    for case in CASES:
        if args.only and args.only not in case[0]:
            continue
        code = RUN_ONE.format(here=HERE, args=case[1:], timed=args.time)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"  {case[0]}: failed\n{proc.stderr[-2000:]}", flush=True)
            continue
        measured = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append({"id": case[0], "trainfit_args": trainfit_args(case), **measured})
        timing = (f" step {measured['step_time_s'] * 1e3:.1f} ms" if "step_time_s" in measured
                  else "")
        print(f"  {case[0]:36s} allocated {measured['max_memory_allocated']:>14,} "
              f"reserved {measured['max_memory_reserved']:>14,}{timing}", flush=True)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, device["name"].replace(" ", "_") + ".json")
    with open(path, "w") as f:
        json.dump({"device": device, "cases": results}, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


def gpu_flags(device):
    """The catalog entry of the measured GPU, else its memory and architecture."""
    names = {"H100": "h100-80gb", "H200": "h200", "A100-SXM4-80GB": "a100-80gb", "A100-SXM4-40GB": "a100-40gb",
             "RTX 4090": "rtx4090", "RTX 3090": "rtx3090", "L4": "l4", "A10": "a10", "T4": "t4"}
    for key, name in names.items():
        if key in device["name"]:
            return ["--gpu", name]
    return ["--gpu-memory", str(device["total_bytes"])]


# How each recorded file's runs were made where its trainfit_args do not say it. The H100 runs
# (2026-11-27) made each step in a function that built the batch and returned the loss (--loop
# scoped); in resnet50's and ACT's fp16 runs GradScaler found inf in both steps, so the
# optimizer never stepped (their allocator recordings hold no optimizer state). The LeRobot
# runs made their batches under a CUDA default device: the snapshots allocate Adam's step
# counters on the GPU (4 bytes each, from __torch_function__ in torch/utils/_device.py under
# _init_group, one per trainable tensor) and the profiles read them back with .item(), two
# device-to-host copies per trainable tensor a step.
_LEROBOT = ["--default-device", "cuda"]
RECORDED_AS = {
    "NVIDIA_H100_80GB_HBM3": {
        "*": ["--loop", "scoped"],
        "resnet50-b32-adamw-amp-fp16": ["--grad-scaler-skips", "2"],
        "L:act-seed000-b8-amp-fp16": ["--grad-scaler-skips", "2", *_LEROBOT],
        "L:act-default-b32": _LEROBOT,
        "L:diffusion-default-b64": _LEROBOT,
        "T:act-seed000-b8": _LEROBOT,
        "T:diffusion-default-b64": _LEROBOT,
    },
}
# Cases trainfit misses by more than the tolerances: the bounds (low, high) each figure is held
# to until the cause is fixed, and why. A gap that closes fails too, to come off this list.
_PLACEMENT = ("the event list matches PyTorch's; the allocator puts blocks elsewhere because "
              "best fit breaks ties between equal cached blocks by address, and CUDA's choice "
              "of addresses is not modelled (new segments at the lowest address match these "
              "runs and miss others)")
# Timing runs measure reserved over 25 steps; the bound, like the central figure, replays two.
_TWENTY_FIVE_STEPS = ("the bound covers workspaces no recording measured, not what steps after "
                      "the second add to reserved memory in a 25-step timing run")
KNOWN_GAPS = {
    "NVIDIA_H100_80GB_HBM3": {
        "resnet50-b8-momentum": {"bounds": {"reserved": (-0.01, 0.08)}, "why": _PLACEMENT},
        "resnet50-b8-adam": {"bounds": {"reserved": (-0.01, 0.04)}, "why": _PLACEMENT},
        "resnet50-b8-adamw": {"bounds": {"reserved": (-0.01, 0.04)}, "why": _PLACEMENT},
        "vgg16_bn-b8-sgd": {"bounds": {"reserved": (-0.01, 0.04)}, "why": _PLACEMENT},
        "vgg16_bn-b8-momentum": {"bounds": {"reserved": (-0.01, 0.04)}, "why": _PLACEMENT},
        "resnet50-b32-adamw-amp-bf16": {
            "bounds": {"reserved": (-0.035, 0.03)},
            "why": "no bf16 recording: its convolutions take the fp16 run's workspaces"},
        "L:act-default-b32": {
            "bounds": {"reserved": (-0.01, 0.08)},
            "why": _PLACEMENT + "; every block above 1 MiB is allocated and freed as PyTorch did, "
                   "in order and identity, through the first 1,182 of them (the backbone's "
                   "backward), where a 629 MB gradient finds no cached block and opens a segment "
                   "PyTorch's run did not"},
        "T:act-seed000-b8": {
            "bound_why": _TWENTY_FIVE_STEPS + "; every workspace of this run is at its bound in it "
                         "(186 unmeasured) and none reaches the reserved peak",
            "bounds": {"reserved": (-0.04, 0.03)},
            "why": "reserved of a timing run, which no allocator recording shows: its fp32 "
                   "convolutions at batch 8 on 640x360 and 640x480 images were never recorded "
                   "(their cuDNN workspaces are scaled from batch 32 or take the rule); the "
                   "recordings of the same cameras under fp16 autocast and of ACT at batch 32 "
                   "in fp32 come out +0.2% and +2.9%"},
        "T:diffusion-default-b64": {
            "bound_why": _TWENTY_FIVE_STEPS,
            "bounds": {"reserved": (-0.03, 0.03), "step": (-0.31, 0.10),
                       "step profiled": (-0.31, 0.08)},
            "why": "reserved over 25 steps of a timing run, which this replay does not play; the "
                   "step: its kernels take 37.3 ms a step (the profile) and the cost model's 27, "
                   "short on cuDNN's layout conversions around the U-Net's 1-D convolutions (9.0 "
                   "ms in the profile, counted at copy speed: weights of 5 taps and activations "
                   "of 16 positions likely transpose far below it) and on their products, which the "
                   "profile's totals per kernel name cannot apportion to shapes; and the host, "
                   "whose per-op costs the profile gives only as inflated by the profiler"},
    },
}


def recorded_args(card, case):
    overlay = RECORDED_AS.get(card, {})
    args = [*case["trainfit_args"], *overlay.get("*", []), *overlay.get(case["id"], [])]
    setup = case.get("setup", {})
    if setup.get("cudnn_benchmark") and "--cudnn-benchmark" not in args:
        args.append("--cudnn-benchmark")
    if "--hf-config" in args:  # the config beside the recordings
        i = args.index("--hf-config") + 1
        args[i] = os.path.join(RESULTS, card, "hf", args[i])
    return args


def within(error, above, below):
    return -below <= error <= above


def print_phases(case, ours):
    """A traced step's phases (validation/gpu_step_trace.py), each timed alone, beside trainfit's
    parts: the host until the call returned, and the GPU's kernels under the profiler."""
    phases, kernels = case["phases"], case["kernels"]["per_step"]
    t = ours["time_breakdown"]
    for part, measured in (("forward", ("forward",)), ("backward", ("backward",)),
                           ("optimizer", ("optimizer", "zero_grad"))):
        host = sum(phases[p]["host_s"] for p in measured)
        gpu = sum(kernels[p]["gpu_s"] for p in measured)
        print(f"       {part:9s} host {host * 1e3:8.2f} ms (trainfit {t[part + '_host_s'] * 1e3:8.2f})"
              f"  GPU {gpu * 1e3:8.2f} ms (trainfit {t[part + '_gpu_s'] * 1e3:8.2f})")


def compare(args):
    files = sorted(glob.glob(os.path.join(RESULTS, "*.json")))
    if not files:
        print("gpu replay: skipped, no GPU measurements are recorded in validation/gpu_results/")
        sys.exit(SKIPPED)
    failures = 0
    for path in files:
        card = os.path.basename(path)[:-len(".json")]
        with open(path) as f:
            data = json.load(f)
        device = data["device"]
        print(f"{device['name']} (torch {device['torch']}, CUDA {device['cuda']}): {card}")
        cases = [("", c) for c in data["cases"]]
        for where, name in (("more ", "more_cases.json"), ("trace ", "step_traces.json")):
            more = os.path.join(RESULTS, card, name)
            if os.path.exists(more):
                with open(more) as f:
                    cases += [(where, c) for c in json.load(f)["cases"]]
        errors = {"allocated": [], "reserved": [], "device used": [], "step": [], "step profiled": []}
        bound_errors = {"reserved": [], "device used": []}
        gaps = KNOWN_GAPS.get(card, {})
        profiles = glob.glob(os.path.join(RESULTS, card, "*profile.json"))
        for where, case in cases:
            def estimate(*extra):
                return json.loads(subprocess.run(
                    [args.trainfit, "estimate", *recorded_args(card, case), *gpu_flags(device),
                     *extra, "--json"], capture_output=True, text=True, check=True).stdout)
            ours = estimate()
            figures = {}
            if "max_memory_allocated" in case:
                figures["allocated"] = ours["peak_allocated_bytes"] / case["max_memory_allocated"] - 1
                figures["reserved"] = ours["peak_reserved_bytes"] / case["max_memory_reserved"] - 1
            if "device_used" in case:
                figures["device used"] = ours["device_used_bytes"] / case["device_used"] - 1
            # A timing run's median step, against the catalog's card and the card's calibration.
            if "step_time_s" in case:
                figures["step"] = ours["step_time_s"] / case["step_time_s"] - 1
                if profiles:
                    profiled = estimate("--gpu-profile", profiles[0])
                    figures["step profiled"] = profiled["step_time_s"] / case["step_time_s"] - 1
            # Note [Workspace bounds]: the upper figures may never be below a measurement.
            below_bound = []
            for key, field, measured in (("reserved", "peak_reserved_upper_bytes",
                                          case.get("max_memory_reserved")),
                                         ("device used", "device_used_upper_bytes",
                                          case.get("device_used"))):
                if measured:
                    upper = ours[field] / measured - 1
                    bound_errors[key].append(upper)
                    if upper < 0:
                        below_bound.append(f"{key} bound {upper:+.2%} BELOW the measurement")
                    elif ours[field] != ours[field.replace("_upper", "")]:
                        below_bound.append(f"{key} up to {upper:+.2%}")
            line = " ".join(f"{k} {v:+.2%}" for k, v in figures.items())
            if below_bound:
                line += " [" + ", ".join(below_bound) + "]"
            gap = gaps.get(case["id"], {})
            sources = ours.get("workspace_sources", {})
            unmeasured = sum(sources.get(k, {}).get("calls", 0) for k in ("scaled", "rule"))
            if any("BELOW" in b for b in below_bound):
                if gap.get("bound_why"):
                    line += f" (bound: {gap['bound_why']})"
                elif unmeasured == 0:
                    # Every workspace measured: the bound is the central figure (DESIGN.md), which
                    # the tolerances above hold.
                    line += " (every workspace measured: the bound is the central figure)"
                else:
                    failures += 1
            for key, value in figures.items():
                errors[key].append(value)
            bounds = {k: (args.tolerance, args.too_low) if k == "allocated" else
                      (args.time_tolerance, args.time_tolerance) if k == "step" else
                      (args.profiled_time_tolerance, args.profiled_time_tolerance)
                      if k == "step profiled" else (args.reserved_tolerance, args.too_low)
                      for k in figures}
            ok = all(within(v, *bounds[k]) for k, v in figures.items())
            gap = gaps.get(case["id"])
            if gap:
                for key, (low, high) in gap["bounds"].items():
                    bounds[key] = (high, -low)
                held = all(within(v, *bounds[k]) for k, v in figures.items())
                status = "FAIL" if ok or not held else "gap "
                note = (" (within tolerance now: take it off KNOWN_GAPS)" if ok else
                        f" (known gap: {gap['why']})")
                failures += status == "FAIL"
                print(f"  {status} {where}{case['id']:40s} {line}{note}")
                if "phases" in case:
                    print_phases(case, ours)
                continue
            failures += not ok
            print(f"  {'ok  ' if ok else 'FAIL'} {where}{case['id']:40s} {line}")
            if "phases" in case:
                print_phases(case, ours)
        for key, values in errors.items():
            if values:
                print(f"  {key}: median error {statistics.median(values):+.2%}, "
                      f"max |error| {max(abs(v) for v in values):.2%} over {len(values)} cases")
        for key, values in bound_errors.items():
            if values:
                print(f"  {key} bound: {sum(v >= 0 for v in values)} of {len(values)} cases at or "
                      f"above the measurement, lowest {min(values):+.2%}, highest "
                      f"{max(values):+.2%}")
    sys.exit(1 if failures else 0)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--only", help="run only cases whose id contains this")
    m.add_argument("--time", action="store_true",
                   help="also time each case's step (compare then checks it): the median of 20 "
                        "synchronised steps after 5 warm-up steps, after the memory figures")
    c = sub.add_parser("compare")
    c.add_argument("--trainfit", required=True)
    c.add_argument("--tolerance", type=float, default=0.02, help="peak allocated, above")
    c.add_argument("--reserved-tolerance", type=float, default=0.03,
                   help="peak reserved and device used, above")
    c.add_argument("--too-low", type=float, default=0.01, help="any memory figure, below")
    c.add_argument("--time-tolerance", type=float, default=0.10,
                   help="step time with the catalog's card, either way")
    c.add_argument("--profiled-time-tolerance", type=float, default=0.08,
                   help="step time with the card's calibration profile, either way")
    args = ap.parse_args()
    measure(args) if args.command == "measure" else compare(args)


if __name__ == "__main__":
    main()
