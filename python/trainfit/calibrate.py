"""Measures the GPU this runs on and writes a trainfit GPU profile, which `--gpu-profile FILE`
uses in place of the catalog's step-time constants:

    python3 -m trainfit.calibrate --out gpu.json
    trainfit estimate --model resnet50 --batch 256 --gpu a100-80gb --gpu-profile gpu.json

It times, in well under a minute: matrix products of a dozen shapes in each math the card has
(FP32, TF32, FP16, BF16), a few convolutions (channels_last, TF32 and FP16), device-to-device
copies, a queue of empty kernels (the GPU's cost per kernel), and tiny eager ops forward and
backward (the host's cost per op and per autograd node). trainfit fits its constants to these
timings; the profile holds the timings themselves, not the constants.

It needs PyTorch with a CUDA GPU and refuses without one.
"""
import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

FORMAT = "trainfit-gpu-profile"
VERSION = 1

# (m, n, k): square products from small to large, the skinny and flat ones of transformer
# layers at small batches, and a small K.
GEMM_SHAPES: Tuple[Tuple[int, int, int], ...] = (
    (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
    (4096, 4096, 4096), (8192, 8192, 8192), (128, 4096, 4096), (4096, 4096, 128),
    (16384, 1024, 4096), (16384, 4096, 1024), (32768, 768, 768), (8192, 3072, 768),
)
QUICK_GEMM_SHAPES = ((16, 16, 16), (32, 64, 48))
# (batch, channels in, height = width, channels out, kernel, stride): ResNet-50's stem and a 3x3
# and two 1x1 convolutions of its stages.
CONV_SHAPES: Tuple[Tuple[int, int, int, int, int, int], ...] = (
    (64, 3, 224, 64, 7, 2), (64, 64, 56, 64, 3, 1), (64, 256, 56, 64, 1, 1),
    (64, 512, 28, 128, 1, 1), (64, 128, 28, 128, 3, 1), (64, 256, 14, 256, 3, 1),
)
QUICK_CONV_SHAPES = ((2, 3, 16, 4, 3, 1),)
COPY_BYTES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
QUICK_COPY_BYTES = (1 << 12,)


class Refused(Exception):
    """Why there is nothing to measure here."""


def _timer(device: str) -> Callable[[Callable[[], Any], int], float]:
    """Seconds per call of `fn` over `reps` calls after two warm-up calls: CUDA events on a GPU,
    the wall clock elsewhere (a CPU run only checks the profile's shape)."""
    import torch

    def on_gpu(fn: Callable[[], Any], reps: int) -> float:
        """Seconds per call of fn on the GPU, timed with CUDA events after two warm-up calls."""
        for _ in range(2):
            fn()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / reps

    def on_host(fn: Callable[[], Any], reps: int) -> float:
        """Seconds per call of fn on the host clock, after two warm-up calls."""
        for _ in range(2):
            fn()
        begin = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - begin) / reps

    return on_gpu if device == "cuda" else on_host


def _reps(seconds_once: float, budget: float = 0.05) -> int:
    """Repetitions that take about `budget` seconds, between 3 and 200."""
    return max(3, min(200, int(budget / max(seconds_once, 1e-7))))


def _maths(device: str, capability: Tuple[int, int]) -> List[str]:
    """The matmul precisions worth timing on this device (TF32 and bf16 from Ampere on)."""
    if device != "cuda":
        return ["fp32"]
    maths = ["fp32", "fp16"]
    if capability >= (8, 0):
        maths += ["tf32", "bf16"]
    return maths


def _dtype(math: str) -> Any:
    """The torch dtype a precision computes in."""
    import torch
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16}[math]


def measure_gemms(device: str, maths: Sequence[str],
                  shapes: Sequence[Tuple[int, int, int]]) -> List[Dict[str, Any]]:
    """Seconds and TFLOP/s of each (m, n, k) matmul in each precision."""
    import torch
    timer = _timer(device)
    rows = []
    for math in maths:
        # TF32 only where it is asked for; FP32 products run on the CUDA cores.
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = math == "tf32"
        for m, n, k in shapes:
            a = torch.randn(m, k, device=device, dtype=_dtype(math))
            b = torch.randn(k, n, device=device, dtype=_dtype(math))
            once = timer(lambda: torch.mm(a, b), 1)
            seconds = timer(lambda: torch.mm(a, b), _reps(once))
            rows.append({"math": math, "m": m, "n": n, "k": k, "seconds": seconds})
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def measure_convs(device: str, maths: Sequence[str],
                  shapes: Sequence[Tuple[int, int, int, int, int, int]]) -> List[Dict[str, Any]]:
    """Seconds and TFLOP/s of each convolution shape in each precision (channels last)."""
    import torch
    timer = _timer(device)
    rows = []
    # cuDNN runs FP32 convolutions in TF32 by default; channels_last spares the layout change.
    conv_maths = [m for m in maths if m in ("tf32", "fp16")] or list(maths[:1])
    for math in conv_maths:
        for n, c, hw, k_out, r, stride in shapes:
            x = torch.randn(n, c, hw, hw, device=device, dtype=_dtype(math))
            w = torch.randn(k_out, c, r, r, device=device, dtype=_dtype(math))
            x = x.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            w = w.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            pad = r // 2

            def run() -> Any:
                """One convolution."""
                return torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)

            once = timer(run, 1)
            seconds = timer(run, _reps(once))
            rows.append({"math": math, "n": n, "c": c, "h": hw, "w": hw,
                         "out_channels": k_out, "kernel": r, "stride": stride, "padding": pad,
                         "seconds": seconds})
    return rows


def measure_copies(device: str, sizes: Sequence[int]) -> List[Dict[str, Any]]:
    """Seconds and GB/s of device-to-device copies of each size."""
    import torch
    timer = _timer(device)
    rows = []
    for size in sizes:
        src = torch.empty(size // 4, device=device, dtype=torch.float32).fill_(1)
        dst = torch.empty_like(src)
        once = timer(lambda: dst.copy_(src), 1)
        seconds = timer(lambda: dst.copy_(src), _reps(once))
        rows.append({"bytes": 2 * src.numel() * 4, "seconds": seconds})  # read and written
    return rows


def measure_empty_kernel(device: str, count: int) -> float:
    """The GPU's time per kernel when kernels queue back to back: a sleeping kernel holds the
    GPU while the host queues `count` one-element adds, so that the events time the GPU alone."""
    import torch
    x = torch.zeros(1, device=device)
    if device != "cuda":
        return _timer(device)(lambda: x.add_(1), count)
    for _ in range(10):
        x.add_(1)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # tens of milliseconds, longer than queuing takes
    start.record()
    for _ in range(count):
        x.add_(1)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3 / count


def measure_host(device: str, count: int) -> Tuple[float, float]:
    """Host seconds per eager op with autograd recording, and per node of its backward: a chain
    of `count` one-element multiplies, timed on the wall clock (the GPU keeps up with them)."""
    import torch

    def chain() -> Any:
        """A chain of tiny ops, for the launch overhead."""
        x = torch.ones(1, device=device, requires_grad=True)
        y = x
        for _ in range(count):
            y = y * 1.0001
        return y

    samples_op, samples_node = [], []
    for _ in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        begin = time.perf_counter()
        y = chain()
        forward = time.perf_counter() - begin
        if device == "cuda":
            torch.cuda.synchronize()
        begin = time.perf_counter()
        y.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        backward = time.perf_counter() - begin
        samples_op.append(forward / count)
        samples_node.append(backward / count)
    # The first run pays for warming up: the median of the rest.
    return statistics.median(samples_op[1:]), statistics.median(samples_node[1:])


def _host_seconds(fn: Callable[[], Any], device: str, runs: int = 5) -> float:
    """Wall-clock seconds of `fn` with the queue drained before and after: the median of
    `runs` after a first that warms up."""
    import torch
    times = []
    for _ in range(runs + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        begin = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - begin)
    return statistics.median(times[1:])


def measure_host_work(device: str, count: int) -> Dict[str, float]:
    """Host seconds of the work trainfit charges besides ops and nodes: a view C++ makes
    (list(x)'s selects), a gradient the engine hands on (stack's backward), a parameter in an
    optimizer's Python loop (zero_grad), a .item() of a GPU scalar, a cuDNN convolution's own
    host work beyond an op's, and the shares a TorchFunctionMode (torch.set_default_device's)
    and an nn.Module call add to a call into torch."""
    import torch
    from torch.overrides import TorchFunctionMode
    out: Dict[str, float] = {}
    x = torch.ones(count, 1, device=device, requires_grad=True) * 1.0
    views = _host_seconds(lambda: x.unbind(0), device) / count
    out["view_s"] = views

    def stacked() -> Any:
        """list(x) stacked again and its backward: the gradient cut back into pieces."""
        torch.stack(x.unbind(0)).sum().backward(retain_graph=True)

    out["grad_edge_s"] = max(_host_seconds(stacked, device) / count - 2 * views, 0.0)
    params = [torch.nn.Parameter(torch.zeros(1, device=device)) for _ in range(count)]
    opt = torch.optim.SGD(params, lr=0.0)

    def zero_grad() -> None:
        """zero_grad(set_to_none=True) over freshly set gradients; only the loop is timed."""
        opt.zero_grad(set_to_none=True)

    loops = []
    for _ in range(6):
        for p in params:
            p.grad = torch.zeros_like(p)
        loops.append(_host_seconds(zero_grad, device, runs=1))
    out["param_loop_s"] = statistics.median(loops[1:]) / count

    class DeviceMode(TorchFunctionMode):
        """torch/utils/_device.py's DeviceContext: factories get the default device."""

        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            """Every call passes through, as the default device's mode passes non-factories."""
            return func(*args, **(kwargs or {}))

    y = torch.ones(1, device=device)

    def chain() -> None:
        """`count` tiny multiplies."""
        z = y
        for _ in range(count):
            z = z * 1.0001

    plain = _host_seconds(chain, device)
    with DeviceMode():
        moded = _host_seconds(chain, device)
    out["mode_call_share"] = max(moded / plain - 1, 0.0)

    class Step(torch.nn.Module):
        """One multiply in a module's forward."""

        def forward(self, z: Any) -> Any:
            """The same multiply as the chain's."""
            return z * 1.0001

    steps = [Step() for _ in range(count)]

    def module_chain() -> None:
        """The chain again, each multiply called through a module."""
        z = y
        for step in steps:
            z = step(z)

    out["module_call_share"] = max(_host_seconds(module_chain, device) / plain - 1, 0.0)
    if device == "cuda":
        s = torch.zeros((), device=device)
        out["sync_s"] = _host_seconds(lambda: [s.item() for _ in range(count)], device) / count
        image = torch.randn(1, 8, 8, 8, device=device)
        weight = torch.randn(8, 8, 3, 3, device=device)

        def convs() -> None:
            """`count` tiny convolutions, whose GPU time the host's outlasts."""
            for _ in range(count):
                torch.nn.functional.conv2d(image, weight, padding=1)

        with torch.no_grad():
            per_conv = _host_seconds(convs, device) / count
        out["cudnn_call_s"] = max(per_conv - plain / count, 0.0)
    # A figure the noise took to zero is left out: trainfit keeps its own constant for it.
    return {k: v for k, v in out.items() if v > 0}


def measure(device: str = "cuda", quick: bool = False,
            progress: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """The profile of `device` as a dict. `quick` uses tiny sizes (a CPU run that only checks
    the profile's shape)."""
    import torch
    say = progress or (lambda _: None)
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        name, sms, total = props.name, props.multi_processor_count, props.total_memory
        capability = (props.major, props.minor)
    else:
        name, sms, total, capability = "cpu", 1, 1 << 30, (0, 0)
    maths = _maths(device, capability)
    profile: Dict[str, Any] = {
        "format": FORMAT, "version": VERSION,
        "device": {"name": name, "sm_count": sms, "compute_capability": list(capability),
                   "total_bytes": total},
        "torch": torch.__version__, "cuda": torch.version.cuda or "",
    }
    say(f"products ({', '.join(maths)})")
    profile["gemm"] = measure_gemms(device, maths, QUICK_GEMM_SHAPES if quick else GEMM_SHAPES)
    say("convolutions")
    profile["conv"] = measure_convs(device, maths, QUICK_CONV_SHAPES if quick else CONV_SHAPES)
    say("copies")
    profile["copy"] = measure_copies(device, QUICK_COPY_BYTES if quick else COPY_BYTES)
    say("kernel and host overheads")
    profile["empty_kernel_s"] = measure_empty_kernel(device, 50 if quick else 500)
    profile["host_op_s"], profile["autograd_node_s"] = measure_host(device,
                                                                     50 if quick else 1000)
    say("host work besides ops")
    profile["host"] = measure_host_work(device, 50 if quick else 1000)
    return profile


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; the exit status (2: a usage error, one line)."""
    parser = argparse.ArgumentParser(
        prog="python3 -m trainfit.calibrate",
        description="Measure this machine's CUDA GPU for trainfit's step time (under a minute) "
                    "and write a GPU profile for --gpu-profile.",
        epilog="Example: python3 -m trainfit.calibrate --out gpu.json && trainfit estimate "
               "--model resnet50 --batch 256 --gpu a100-80gb --gpu-profile gpu.json")
    parser.add_argument("--out", required=True, help="the profile to write (JSON)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("trainfit.calibrate: error: PyTorch is not installed (hint: run it with the Python "
              "that trains)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("trainfit.calibrate: error: no CUDA GPU: torch.cuda.is_available() is False "
              "(hint: run it on the machine that trains, with a CUDA build of PyTorch)",
              file=sys.stderr)
        return 2
    begin = time.perf_counter()
    profile = measure("cuda", progress=lambda what: print(f"  measuring {what}", file=sys.stderr))
    with open(args.out, "w") as f:
        json.dump(profile, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {profile['device']['name']}, "
          f"{len(profile['gemm'])} products, {len(profile['conv'])} convolutions, "
          f"{time.perf_counter() - begin:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
