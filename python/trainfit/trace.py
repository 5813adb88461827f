"""Trace a model's training step for trainfit, from the command line.

    PYTHONPATH=python python3 -m trainfit.trace --model torchvision.models:mobilenet_v2 \\
        --input 3x224x224 --target classes:1000 --optimizer adamw --out mobilenet_v2.trace.json
    trainfit estimate --trace mobilenet_v2.trace.json --batch 128 --gpu rtx4090

The model is built by calling FACTORY from PKG.MODULE (with --kwargs as keyword arguments) and
trained on random inputs for two iterations at each batch size (default 2 and 3) on the CPU.
Batch 1 is left out by default: there some models take another path (PyTorch skips a copy when
a dimension has size 1), which would not line up with the larger batch.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ._specs import UsageError, load_callable, parse_kwargs
from .tracer import trace

OPTIMIZERS: Dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.01),
    "momentum": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
}


def parse_dims(text: str) -> Tuple[int, ...]:
    """--input: "3x224x224" -> (3, 224, 224), or a UsageError."""
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise UsageError(f"--input '{text}' is not a shape like 3x224x224 (sizes without the batch)")
    return dims


def load_factory(spec: str) -> Callable[..., Any]:
    """--model PKG.MODULE:FACTORY: the factory."""
    return load_callable(spec, "--model", "torchvision.models:resnet50")


def scalar_loss(output: Any) -> torch.Tensor:
    """--target none: the model returns its loss (a scalar, or an object with .loss / ['loss'])."""
    if isinstance(output, dict) and "loss" in output:
        output = output["loss"]
    elif hasattr(output, "loss") and output.loss is not None:
        output = output.loss
    if not isinstance(output, torch.Tensor) or output.numel() != 1:
        raise UsageError("--target none needs a model that returns its loss as a scalar")
    return output


def first_tensor(output: Any) -> torch.Tensor:
    """The tensor a loss applies to: the output, its first element, or its 'logits'."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    if isinstance(output, dict) and isinstance(output.get("logits"), torch.Tensor):
        logits: torch.Tensor = output["logits"]
        return logits
    raise UsageError("the model's output is not a tensor; use --target none with a model that "
                     "returns its loss, or trace from Python with your own loss_fn")


def build(args: argparse.Namespace) -> Tuple[torch.nn.Module, Callable[[int], Tuple[Any, Any]],
                                              Callable[[Any, Any], torch.Tensor]]:
    """The model, make_batch(n) and loss_fn(output, target) the flags describe."""
    factory = load_factory(args.model)
    kwargs = parse_kwargs(args.kwargs, '{"num_classes": 10}')
    model = factory(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--model {args.model} returned {type(model).__name__}, not a torch.nn.Module")
    inputs = [parse_dims(i) for i in args.input]
    target = args.target
    if target.startswith("classes:"):
        try:
            classes = int(target.split(":", 1)[1])
        except ValueError:
            classes = 0
        if classes < 1:
            raise UsageError(f"--target '{target}': use classes:N with N >= 1")

        def make_target(n: int) -> Optional[torch.Tensor]:
            """Random classes."""
            return torch.randint(0, classes, (n,))

        def loss_fn(out: Any, y: Any) -> torch.Tensor:
            """Cross-entropy."""
            return torch.nn.functional.cross_entropy(first_tensor(out), y)
    elif target == "regression":
        with torch.no_grad():  # the output's shape per sample, for a target of the same shape
            probe = first_tensor(model(*[torch.randn(1, *d) for d in inputs]))
        per_sample = tuple(probe.shape[1:])

        def make_target(n: int) -> Optional[torch.Tensor]:
            """A random target shaped like the output."""
            return torch.randn(n, *per_sample)

        def loss_fn(out: Any, y: Any) -> torch.Tensor:
            """Mean squared error."""
            return torch.nn.functional.mse_loss(first_tensor(out), y)
    elif target == "none":
        def make_target(n: int) -> Optional[torch.Tensor]:
            """No target: the model computes its loss."""
            return None

        def loss_fn(out: Any, y: Any) -> torch.Tensor:
            """The model's own loss."""
            return scalar_loss(out)
    else:
        raise UsageError(f"--target '{target}': use classes:N, regression or none")

    def make_batch(n: int) -> Tuple[Any, Any]:
        """Random inputs of the --input shapes and a target."""
        xs = tuple(torch.randn(n, *d) for d in inputs)
        return xs, make_target(n)

    return model, make_batch, loss_fn


def main(argv: Optional[List[str]] = None) -> int:
    """The command line; the exit status (2: a usage error, one line)."""
    ap = argparse.ArgumentParser(
        prog="python3 -m trainfit.trace",
        description="Record what a model's training step allocates and frees on the CPU, at "
                    "two batch sizes, for `trainfit estimate --trace FILE --batch N`.",
        epilog="example: python3 -m trainfit.trace --model torchvision.models:mobilenet_v2 "
               "--input 3x224x224 --target classes:1000 --optimizer adamw --out mnv2.trace.json")
    ap.add_argument("--model", required=True, metavar="PKG.MODULE:FACTORY",
                    help="a function that returns the torch.nn.Module (torchvision.models:resnet50)")
    ap.add_argument("--kwargs", metavar="JSON", help="keyword arguments for FACTORY, as a JSON object")
    ap.add_argument("--input", action="append", required=True, metavar="CxHxW",
                    help="the shape of one sample of a model input (no batch); repeat for "
                         "models with several inputs")
    ap.add_argument("--target", default="classes:1000",
                    help="classes:N (cross-entropy on N classes), regression (MSE on a target "
                         "shaped like the output) or none (the model returns its loss); "
                         "default classes:1000")
    ap.add_argument("--optimizer", default="adamw", choices=sorted(OPTIMIZERS),
                    help="torch.optim optimizer (default adamw)")
    ap.add_argument("--batch-sizes", default="2,3", metavar="B1,B2[,B3]",
                    help="batch sizes to trace (default 2,3; a third checks that sizes grow "
                         "linearly with the batch)")
    ap.add_argument("--autocast", choices=("cuda", "cpu"),
                    help="run forward and the loss under torch.autocast in bfloat16, casting as "
                         "this device's autocast does (cuda: as a GPU's, emulated on the CPU), "
                         "for `trainfit estimate --precision amp-bf16` or amp-fp16; default: fp32")
    ap.add_argument("--name", help="the model's name in reports (default: FACTORY)")
    ap.add_argument("--out", required=True, metavar="FILE", help="where to write the trace (JSON)")
    args = ap.parse_args(argv)
    try:
        try:
            batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
        except ValueError:
            raise UsageError(f"--batch-sizes '{args.batch_sizes}' is not a list like 2,3")
        torch.manual_seed(0)
        model, make_batch, loss_fn = build(args)
        name = args.name or args.model.split(":", 1)[1]

        def progress(batch: int, seconds: float) -> None:
            """One line per traced batch size."""
            print(f"traced {name} at batch {batch} ({seconds:.1f} s)", file=sys.stderr, flush=True)

        start = time.monotonic()
        result = trace(model, make_batch, loss_fn, OPTIMIZERS[args.optimizer], batch_sizes,
                       out=args.out, name=name, progress=progress, autocast=args.autocast)
    except (UsageError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write --out '{args.out}': {e.strerror}", file=sys.stderr)
        return 2
    events = sum(len(r["events"]) for r in result["runs"])
    print(f"wrote {args.out}: {len(result['runs'])} runs, {events} events, "
          f"{time.monotonic() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
