"""The host-side constants of the step-time model, derived from what was recorded.

trainfit's eager-host model (src/estimate/step_time.h, GpuTiming) charges, besides each op
dispatched from Python and each autograd node, five kinds of host work whose costs come from
the PyTorch profiler tables of two LeRobot steps on the H100 (validation/gpu_results/
NVIDIA_H100_80GB_HBM3/snapshots.tar.xz: T_act-seed000-b8.txt, T_diffusion-default-b64.txt,
three steps each), and one from a measurement on this machine:

- view_s: a tensor C++ makes without a kernel: aten::select's CPU total per call (ACT's
  list(x) of its camera tokens and StackBackward0's unbind make 3,370 a step);
- grad_edge_s: a gradient the autograd engine hands on beyond a node's first: StackBackward0's
  self time per gradient (two stacks of ACT's 842 encoder tokens a step);
- param_loop_s: a parameter in one of the optimizer's Python loops: zero_grad's self time per
  trainable tensor, over both models;
- cudnn_call_s: a cuDNN convolution's own host work: aten::cudnn_convolution's self time per
  call in ACT's table;
- sync_s: a .item() of a GPU scalar (dispatch, copy, wait): aten::_local_scalar_dense's CPU
  total per call, over both;
- mode_call_share: what a TorchFunctionMode (torch.set_default_device installs one) adds to a
  Python call into torch, as a share of the call: a chain of multiplies, as trainfit.calibrate
  times its host op, with and without a mode whose __torch_function__ is torch/utils/_device.py's
  DeviceContext's;
- module_call_share: what calling an op through an nn.Module (Module.__call__ and the Python
  frame of its forward) adds to the call, as a share of it: the same chain with each multiply
  in a module's forward, and without.
  Both shares are timed with the local torch (--remeasure) and recorded in
  validation/measured/host_costs.json.

The per-op and per-node costs come from the H100's calibration (h100-profile.json beside the
snapshots, `python3 -m trainfit.calibrate` on the card's own host): python_op_s is its host_op_s
and autograd_node_s its autograd_node_s, each less the launch (launch_s), which trainfit counts
per kernel.

    /usr/bin/python3 validation/host_costs.py              # derive, compare with step_time.h
    /usr/bin/python3 validation/host_costs.py --remeasure  # time the two shares again

Exits 1 when a constant in step_time.h is not what the recordings give (within 3%, the
constants are rounded).
"""
import argparse
import json
import os
import re
import statistics
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SNAPSHOTS = os.path.join(HERE, "gpu_results", "NVIDIA_H100_80GB_HBM3", "snapshots.tar.xz")
HEADER = os.path.join(ROOT, "src", "estimate", "step_time.h")
RECORDED = os.path.join(HERE, "measured", "host_costs.json")
PROFILE = os.path.join(HERE, "gpu_results", "NVIDIA_H100_80GB_HBM3", "h100-profile.json")
TABLES = {"act": "snapshots/T_act-seed000-b8.txt", "diffusion": "snapshots/T_diffusion-default-b64.txt"}
STEPS = 3  # each table covers three steps
# ACT with seed 000's cameras (640x360, 640x480, 640x480, ResNet-18 features at 1/32): 240 + 300
# + 300 camera tokens, the latent and the robot state.
ACT_TOKENS = 842
TOLERANCE = 0.03
UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def seconds(text):
    m = re.fullmatch(r"([0-9.]+)(us|ms|s)", text.strip())
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


def read_table(text):
    """Rows of a profiler table by name: self CPU, CPU total and calls (the first table a name
    appears in)."""
    rows = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != 11 or not cells[-1].isdigit():
            continue
        name = cells[0]
        if name in rows:
            continue
        rows[name] = {"self_cpu": seconds(cells[2]), "cpu_total": seconds(cells[4]),
                      "calls": int(cells[-1])}
    return rows


def trainable_tensors():
    """The trainable tensors of the two recorded policies, as lerobot_reference builds them."""
    sys.path.insert(0, HERE)
    import lerobot_reference
    counts = {}
    for name, sets in (("act", {"cameras": "640x360,640x480,640x480", "chunk_size": "30"}),
                       ("diffusion", {})):
        policy, _ = lerobot_reference.build(name, batch=1, sets=sets)
        counts[name] = sum(1 for p in policy.parameters() if p.requires_grad)
    return counts


def derive(tables, tensors):
    act, diff = tables["act"], tables["diffusion"]
    zero_grad = [t[n] for t, n in ((act, "Optimizer.zero_grad#AdamW.zero_grad"),
                                   (diff, "Optimizer.zero_grad#Adam.zero_grad"))]
    items = [act["aten::_local_scalar_dense"], diff["aten::_local_scalar_dense"]]
    stack = act["StackBackward0"]
    return {
        "view_s": act["aten::select"]["cpu_total"] / act["aten::select"]["calls"],
        "grad_edge_s": stack["self_cpu"] / (stack["calls"] * ACT_TOKENS),
        "param_loop_s": sum(z["self_cpu"] for z in zero_grad)
        / (STEPS * (tensors["act"] + tensors["diffusion"])),
        "cudnn_call_s": act["aten::cudnn_convolution"]["self_cpu"]
        / act["aten::cudnn_convolution"]["calls"],
        "sync_s": sum(i["cpu_total"] for i in items) / sum(i["calls"] for i in items),
    }


def measure_mode_share(count=4000, runs=41):
    """A multiply chain's host time per op with and without a DeviceContext-like mode."""
    import torch
    from torch.overrides import TorchFunctionMode

    class DeviceContext(TorchFunctionMode):
        """torch/utils/_device.py's __torch_function__: factories get the default device."""

        def __init__(self, device):
            self.device = torch.device(device)

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in (torch.empty, torch.zeros, torch.ones, torch.tensor, torch.randn) and \
                    kwargs.get("device") is None:
                kwargs["device"] = self.device
            return func(*args, **kwargs)

    def chain():
        x = torch.ones(1, requires_grad=True)
        y = x
        for _ in range(count):
            y = y * 1.0001
        return y

    def per_op():
        start = time.perf_counter()
        chain()
        return (time.perf_counter() - start) / count

    # Alternate the two so that drift in the machine's speed falls on both alike, and take each
    # one's fastest run: what the machine does when nothing else runs.
    plain, moded = [], []
    for _ in range(runs):
        plain.append(per_op())
        with DeviceContext("cpu"):
            moded.append(per_op())
    return {"torch": torch.__version__, "op_s": min(plain), "op_under_mode_s": min(moded),
            "mode_call_share": min(moded) / min(plain) - 1}


def measure_module_share(count=4000, runs=41):
    """A multiply chain's host time per op with each multiply in a module's forward, and
    without."""
    import torch

    class Step(torch.nn.Module):
        def forward(self, z):
            return z * 1.0001

    steps = [Step() for _ in range(count)]

    def plain_chain():
        y = torch.ones(1, requires_grad=True)
        for _ in range(count):
            y = y * 1.0001

    def module_chain():
        y = torch.ones(1, requires_grad=True)
        for step in steps:
            y = step(y)

    def per_op(chain):
        start = time.perf_counter()
        chain()
        return (time.perf_counter() - start) / count

    plain, moduled = [], []
    for _ in range(runs):
        plain.append(per_op(plain_chain))
        moduled.append(per_op(module_chain))
    return {"torch": torch.__version__, "op_s": min(plain), "op_in_module_s": min(moduled),
            "module_call_share": min(moduled) / min(plain) - 1}


def calibrated(launch_s):
    """The H100 calibration's host op and backward node, less the launch trainfit counts."""
    with open(PROFILE) as f:
        profile = json.load(f)
    return {"python_op_s": profile["host_op_s"] - launch_s,
            "autograd_node_s": profile["autograd_node_s"] - launch_s}


def header_constants():
    with open(HEADER) as f:
        text = f.read()
    out = {}
    for name in ("view_s", "grad_edge_s", "param_loop_s", "cudnn_call_s", "sync_s",
                 "mode_call_share", "module_call_share", "python_op_s", "autograd_node_s",
                 "launch_s"):
        m = re.search(rf"double {name} = ([0-9.e-]+);", text)
        if not m:
            raise SystemExit(f"host_costs: {name} is not in {HEADER}")
        out[name] = float(m.group(1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--remeasure", action="store_true",
                    help="time the mode's share with the local torch and record it")
    args = ap.parse_args()
    with tarfile.open(SNAPSHOTS) as tar:
        tables = {k: read_table(tar.extractfile(v).read().decode()) for k, v in TABLES.items()}
    derived = derive(tables, trainable_tensors())
    recorded = {}
    if os.path.exists(RECORDED):
        with open(RECORDED) as f:
            recorded = json.load(f)
    # Seven rounds each: one round's share moves by several percent on a busy machine.
    changed = False
    if args.remeasure or "mode_call_share" not in recorded:
        rounds = [measure_mode_share() for _ in range(7)]
        recorded.update({"torch": rounds[0]["torch"], "rounds": rounds,
                         "mode_call_share": statistics.median(r["mode_call_share"]
                                                              for r in rounds)})
        changed = True
    if args.remeasure or "module_call_share" not in recorded:
        rounds = [measure_module_share() for _ in range(7)]
        recorded.update({"module_rounds": rounds,
                         "module_call_share": statistics.median(r["module_call_share"]
                                                                for r in rounds)})
        changed = True
    if changed:
        with open(RECORDED, "w") as f:
            json.dump(recorded, f, indent=1)
            f.write("\n")
    derived["mode_call_share"] = recorded["mode_call_share"]
    derived["module_call_share"] = recorded["module_call_share"]
    ours = header_constants()
    derived.update(calibrated(ours.pop("launch_s")))
    failures = 0
    for name, value in derived.items():
        error = ours[name] / value - 1
        ok = abs(error) <= TOLERANCE
        failures += not ok
        source = f"torch {recorded['torch']}, this machine" if name.endswith("_share") else \
            "H100 calibration" if name in ("python_op_s", "autograd_node_s") else "H100 profiles"
        print(f"  {'ok  ' if ok else 'FAIL'} {name:16s} recorded {value:.4g} ({source}), "
              f"step_time.h {ours[name]:.4g} ({error:+.1%})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
