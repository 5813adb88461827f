"""Step time as a GPU spends it: each phase's host and GPU time, and every kernel with its op's shapes.

The step-time model (src/estimate/step_time.h) predicts, per phase of a training step, what the
host spends dispatching it and what the GPU spends running its kernels. A median step time says
only whether their sum is right; the PyTorch profiler says which kernels ran but inflates every
host figure it records. This records both sides apart, on a CUDA machine:

    python3 validation/gpu_step_trace.py                  # every case; writes
                                                          # validation/gpu_results/<gpu>/step_traces.json
    python3 validation/gpu_step_trace.py --only diffusion

Each case runs in a fresh process, as validation/gpu_cases.py runs them: the two iterations of
the memory figures (max_memory_allocated, max_memory_reserved), 5 warm-up steps, then

- step_time_s: the median of 20 synchronised steps (gpu_cases.py --time);
- phases: 20 more steps with the queue drained before each phase (the batch and forward with its
  loss, backward, optimizer.step, zero_grad); for each, the median of `host_s`, the time until
  the call returns to Python (what the host spends, as long as it does not wait for the GPU),
  and of `wall_s`, until the GPU has finished it too. No profiler runs in these.
- kernels: 3 steps under torch.profiler with record_shapes: each kernel's name, the phase it
  ran in, the outermost aten op that launched it and that op's input shapes, with the calls and
  total microseconds of each (phase, op, shapes, kernel), largest first; and each phase's kernel
  total (`gpu_s`) and launches.

A case at batch 1 runs almost no GPU work, so its step is the host's: it checks the host model
alone. `validation/gpu_cases.py compare` replays the recorded steps and prints each phase's host
and GPU time beside trainfit's.

    /usr/bin/python3 validation/gpu_step_trace.py --device cpu --only resnet50-b1 --out /tmp/t.json

runs the same recording on the CPU (no kernels; the profiler then records CPU ops), which the
test suite does to keep this script working where no GPU is.
"""
import argparse
import json
import os
import subprocess
import sys

from gpu_cases import device_info

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "gpu_results")

_SEED000 = {"cameras": "640x360,640x480,640x480", "chunk_size": "30"}
# id: (kind, model, batch, sets or optimizer, trainfit's arguments)
CASES = {
    "T:diffusion-default-b64": ("lerobot", "diffusion", 64, {}, []),
    "T:diffusion-default-b8": ("lerobot", "diffusion", 8, {}, []),
    "T:diffusion-default-b1": ("lerobot", "diffusion", 1, {}, []),
    "T:act-seed000-b8": ("lerobot", "act", 8, _SEED000, []),
    "T:act-seed000-b1": ("lerobot", "act", 1, _SEED000, []),
    "T:resnet50-b64-momentum": ("tv", "resnet50", 64, "momentum", []),
    "T:resnet50-b1-momentum": ("tv", "resnet50", 1, "momentum", []),
}
PHASES = ("forward", "backward", "optimizer", "zero_grad")


def trainfit_args(case_id):
    kind, model, batch, extra, _ = CASES[case_id]
    args = ["--model", model, "--batch", str(batch), "--precision", "fp32"]
    if kind == "tv":
        return args + ["--input", "3x224x224", "--optimizer", extra]
    for key, value in extra.items():
        args += ["--set", f"{key}={value}"]
    return args


RUN_ONE = r'''
import json, statistics, sys, time, torch
sys.path.insert(0, {here!r})
kind, model_name, batch, extra, _ = {case!r}
dev = torch.device({device!r})
steps, warmup, timed = {steps!r}, {warmup!r}, {timed!r}
cuda = dev.type == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)
torch.manual_seed(0)
if kind == "lerobot":
    # As the H100's LeRobot runs were made: the policy and each batch built under
    # torch.set_default_device (gpu_cases.py's RECORDED_AS says what that costs).
    import lerobot_reference
    if cuda:
        torch.set_default_device(dev)
    model, make_batch = lerobot_reference.build(model_name, batch, extra)
    model.to(dev)
    opt = lerobot_reference.preset_optimizer(model_name, model.optimizer_groups())
    def forward():
        return model(make_batch())
else:
    import torchvision
    from harness import make_optimizer
    model = getattr(torchvision.models, model_name)().to(dev).train()
    opt = make_optimizer(extra, list(model.parameters()))
    def forward():
        x = torch.randn(batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        return torch.nn.functional.cross_entropy(model(x), y)
def step():
    forward().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if cuda:
    torch.cuda.reset_peak_memory_stats()
for _ in range(2):
    step()
sync()
result = {{}}
if cuda:
    free, total = torch.cuda.mem_get_info()
    result.update(max_memory_allocated=torch.cuda.max_memory_allocated(),
                  max_memory_reserved=torch.cuda.max_memory_reserved(), device_used=total - free)
for _ in range(warmup):
    step()
times = []
for _ in range(timed):
    sync()
    start = time.perf_counter()
    step()
    sync()
    times.append(time.perf_counter() - start)
result["step_time_s"] = statistics.median(times)
# Each phase alone, the queue drained before it: host_s until the call returns, wall_s until the
# GPU is done too.
host = {{p: [] for p in {phases!r}}}
wall = {{p: [] for p in {phases!r}}}
def phase(name, call):
    sync()
    start = time.perf_counter()
    out = call()
    host[name].append(time.perf_counter() - start)
    sync()
    wall[name].append(time.perf_counter() - start)
    return out
for _ in range(timed):
    loss = phase("forward", forward)
    phase("backward", loss.backward)
    phase("optimizer", opt.step)
    phase("zero_grad", lambda: opt.zero_grad(set_to_none=True))
result["phases"] = {{p: {{"host_s": statistics.median(host[p]), "wall_s": statistics.median(wall[p])}}
                    for p in {phases!r}}}
# The kernels, under the profiler: each with its phase and the outermost aten op that launched it.
from torch.profiler import ProfilerActivity, profile, record_function
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
with profile(activities=activities, record_shapes=True) as prof:
    for _ in range(steps):
        with record_function("trainfit:forward"):
            loss = forward()
        with record_function("trainfit:backward"):
            loss.backward()
        with record_function("trainfit:optimizer"):
            opt.step()
        with record_function("trainfit:zero_grad"):
            opt.zero_grad(set_to_none=True)
    sync()
events = list(prof.events())
# The phases' ranges on the host's clock (on CUDA each range also shows as an annotation on the
# GPU's timeline, whose span is the kernels', not the host's).
from torch.autograd import DeviceType
ranges = sorted((e.time_range.start, e.time_range.end, e.name[len("trainfit:"):])
                for e in events
                if e.name.startswith("trainfit:") and e.device_type == DeviceType.CPU)
def phase_at(t):
    for start, end, name in ranges:
        if start <= t <= end:
            return name
    return "other"
def outermost_op(e):
    op = None
    while e is not None:
        if e.name.startswith("aten::"):
            op = e
        e = e.cpu_parent
    return op
groups = {{}}
totals = {{p: {{"gpu_s": 0.0, "launches": 0}} for p in {phases!r} + ("other",)}}
for e in events:
    kernels = getattr(e, "kernels", None) or []
    if cuda and not kernels:
        continue
    if not cuda and (e.name.startswith("trainfit:") or not (
            e.cpu_parent is None or e.cpu_parent.name.startswith("trainfit:"))):
        continue  # on the CPU: the ops called from Python and the engine stand in for kernels
    p = phase_at(e.time_range.start)
    op = outermost_op(e)
    key_op = op.name if op is not None else e.name
    shapes = str(op.input_shapes) if op is not None else ""
    for k in kernels or [None]:
        name = k.name[:160] if k is not None else e.name
        us = k.duration if k is not None else e.cpu_time_total
        g = groups.setdefault((p, key_op, shapes, name), [0, 0.0])
        g[0] += 1
        g[1] += us
        totals[p]["gpu_s"] += us * 1e-6 / steps
        totals[p]["launches"] += 1
rows = sorted(([p, op, shapes, name, calls / steps, us / steps]
               for (p, op, shapes, name), (calls, us) in groups.items()), key=lambda r: -r[5])
result["kernels"] = {{"per_step": totals, "columns": ["phase", "op", "input_shapes", "kernel",
                                                     "calls", "us"], "rows": rows}}
print(json.dumps(result))
'''


def check_recording(case_id, measured):
    """What a recording must hold for the comparison to use it: every phase timed, and the
    forward, backward and optimizer each with kernels (ops on the CPU) attributed to it."""
    problems = [f"phase {p} not timed" for p in PHASES
                if not measured.get("phases", {}).get(p, {}).get("wall_s", 0) > 0]
    per_step = measured.get("kernels", {}).get("per_step", {})
    problems += [f"no kernels attributed to {p}" for p in ("forward", "backward", "optimizer")
                 if not per_step.get(p, {}).get("launches", 0) > 0]
    if not measured.get("step_time_s", 0) > 0:
        problems.append("no step time")
    return [f"{case_id}: {p}" for p in problems]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run only cases whose id contains this")
    ap.add_argument("--device", default="cuda", help="cuda (the recording), or cpu (a dry run)")
    ap.add_argument("--steps", type=int, default=3, help="steps under the profiler")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timed", type=int, default=20, help="steps timed for each median")
    ap.add_argument("--out", help="where to write (default: validation/gpu_results/<gpu>/"
                                  "step_traces.json)")
    args = ap.parse_args()
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_step_trace: no CUDA device here; --device cpu runs a dry run")
    device = device_info(torch) if args.device == "cuda" else {"name": "cpu",
                                                               "torch": torch.__version__}
    cases = []
    for case_id, case in CASES.items():
        if args.only and args.only not in case_id:
            continue
        code = RUN_ONE.format(here=HERE, case=case, device=args.device, steps=args.steps,
                              warmup=args.warmup, timed=args.timed, phases=PHASES)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"  {case_id}: failed\n{proc.stderr[-3000:]}", flush=True)
            continue
        measured = json.loads(proc.stdout.strip().splitlines()[-1])
        problems = check_recording(case_id, measured)
        if problems:
            sys.exit("gpu_step_trace: the recording is incomplete:\n  " + "\n  ".join(problems))
        cases.append({"id": case_id, "trainfit_args": trainfit_args(case_id), **measured})
        phases = "  ".join(f"{p} {v['host_s'] * 1e3:.2f}/{v['wall_s'] * 1e3:.2f}"
                           for p, v in measured["phases"].items())
        print(f"  {case_id:28s} step {measured['step_time_s'] * 1e3:7.2f} ms  "
              f"host/wall ms: {phases}", flush=True)
    if not cases:
        sys.exit("gpu_step_trace: no case ran")
    out = args.out or os.path.join(RESULTS, device["name"].replace(" ", "_"), "step_traces.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"device": device, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
