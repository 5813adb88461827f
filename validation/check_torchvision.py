"""The torchvision corpus: every classification model in the installed torchvision and its
segmentation models (FCN, DeepLabV3, LRASPP, whose output is a dict), each built with its
default arguments (the segmenters without a pretrained backbone, whose default downloads one),
traced as trainfit.estimate(model, example_batch, ...) traces a live module
(trainfit.live.trace_module: batch 2 and 3, the default loss, nothing else given), then

    trainfit estimate --trace FILE --batch B --device-profile cpu --json

must match the peak of live tensor bytes real PyTorch reaches over two training iterations
at batch B (harness.training_peak) within 1%, or be refused with one line that says why (a
trainfit.Error from tracing, or exit 2 from the command). Classifiers use the default loss
(cross-entropy on random classes); segmenters a loss_fn, and their default (a dict output) must
be refused with one line naming the dict.

The test command runs the whole corpus. The smallest model of every family (FAMILIES) is traced
on every run. The others' traces are kept, xz-compressed, in
validation/measured/torchvision-traces.json.xz, valid while PyTorch, torchvision and the sources
that make a trace (TRACE_SOURCES: the tracer, the live model's batches and losses) are unchanged;
a stale file is replaced by tracing every model again (about 20 minutes on two cores), and
--retrace ignores it. What trainfit makes of each trace is computed on every run.

Inputs are as small as each model allows, so that the corpus traces in minutes on two cores:
64x64; 32x32 for ConvNeXt; ViT built with image_size=64 (56 for vit_h_14's 14-pixel patches),
as its position embeddings fix the size; MaxViT at 224 and Inception v3 at 299, the least their
windows and auxiliary head take. Every model trains with SGD (AdamW's state is checked in
validation/check_trace.py; here it would only add time), at batch 6, or 4 above 100 M
parameters. PyTorch's figures are kept in validation/measured/torchvision.json.

    /usr/bin/python3 validation/check_torchvision.py --trainfit build/release/trainfit \\
        [--set families|all] [--only resnet50,vit_b_16] [--shard 1/2] [--threads N] [--remeasure]
        [--retrace]
"""
import argparse
import gc
import hashlib
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import trainfit  # noqa: E402
from trainfit.live import trace_module  # noqa: E402

from harness import Measured, Report  # noqa: E402
from torchvision_cases import measure, segment_loss  # noqa: E402

TOLERANCE = 0.01
SMALL = 64  # image side for models that take any size
# Models that need another size: MaxViT's windows are built for 224; Inception v3's auxiliary
# head pools a 5x5 window from the map 299 makes 17x17; ConvNeXt's depthwise 7x7 convolutions
# are slow on the CPU, and its stride-32 trunk takes 32.
IMAGE_SIDE = {"maxvit_t": 224, "inception_v3": 299, "convnext_tiny": 32, "convnext_small": 32,
              "convnext_base": 32, "convnext_large": 32}
CONSTRUCTOR = {"vit_h_14": {"image_size": 56}}  # other ViTs: image_size=SMALL
BATCH = 6
BIG_PARAMETERS = 100_000_000  # above: batch 4, to keep the run within memory
OPTIMIZER = "sgd"
# Traced on every run: the smallest model of every family but MaxViT (224x224 at least, most of
# a minute to trace), and three segmenters. The other models' traces are kept (KeptTraces).
FAMILIES = ["alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s",
            "googlenet", "inception_v3", "mnasnet0_5", "mobilenet_v2",
            "mobilenet_v3_small", "regnet_x_400mf", "regnet_y_400mf", "resnet18",
            "resnext50_32x4d", "shufflenet_v2_x0_5", "squeezenet1_0", "swin_t", "swin_v2_t",
            "vgg11", "vit_b_32", "wide_resnet50_2", "fcn_resnet50",
            "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]


# What a trace is made from besides PyTorch, torchvision and the model's name and arguments.
TRACE_SOURCES = ("python/trainfit/live.py", "python/trainfit/tracer.py",
                 "validation/torchvision_cases.py")
KEPT_TRACES = os.path.join(HERE, "measured", "torchvision-traces.json.xz")

SEGMENTERS = set(torchvision.models.list_models(module=torchvision.models.segmentation))


def corpus():
    """(name, factory, kind) for every classification and segmentation model installed."""
    models = torchvision.models
    rows = [(n, lambda n=n: models.get_model(n, **constructor_args(n)), "classification")
            for n in models.list_models(module=models)]
    rows += [(n, lambda n=n: models.get_model(n, **constructor_args(n)), "segmentation")
             for n in models.list_models(module=models.segmentation)]
    return rows


def constructor_args(name):
    """Keyword arguments the model is built with: ViT's image_size; no pretrained backbone for
    the segmenters (their default downloads ImageNet weights); else none."""
    if name.startswith("vit_"):
        return CONSTRUCTOR.get(name, {"image_size": SMALL})
    if name in SEGMENTERS:
        return {"weights_backbone": None}
    return {}


def image_side(name):
    return constructor_args(name).get("image_size", IMAGE_SIDE.get(name, SMALL))


def one_line_error(call):
    """The trainfit.Error message of call(), or None when it did not raise."""
    try:
        call()
    except trainfit.Error as e:
        return str(e)
    return None


class KeptTraces:
    """The traces of the models not traced on every run, with each model's parameter count, in
    one xz-compressed JSON file. The file holds a digest of PyTorch's and torchvision's versions
    and TRACE_SOURCES; a different digest discards every trace. A trace is keyed by the model's
    name, constructor arguments, input shape, optimizer and kind, and kept as its JSON text."""

    def __init__(self, path, retrace):
        self.path = path
        digest = hashlib.sha256(f"{torch.__version__} {torchvision.__version__}".encode())
        for source in TRACE_SOURCES:
            with open(os.path.join(HERE, "..", source), "rb") as f:
                digest.update(f.read())
        self.digest = digest.hexdigest()
        self.stale = False
        self.traces = {} if retrace else self._read()
        self.added = {}

    def _read(self):
        """The kept traces when the file is ours and current, else none (stale says which)."""
        try:
            with lzma.open(self.path, "rt") as f:
                data = json.load(f)
        except (OSError, ValueError, EOFError, lzma.LZMAError):
            return {}
        if not isinstance(data, dict) or data.get("digest") != self.digest:
            self.stale = True
            return {}
        traces = data.get("traces")
        return traces if isinstance(traces, dict) else {}

    def get(self, key):
        """(parameters, trace JSON text) kept for key, or None."""
        entry = self.traces.get(json.dumps(key))
        return (entry["parameters"], entry["trace"]) if entry else None

    def add(self, key, parameters, text):
        entry = {"parameters": parameters, "trace": text}
        self.traces[json.dumps(key)] = self.added[json.dumps(key)] = entry

    def save(self, report):
        """Writes the file when a trace was added, with those kept and those parts running beside
        this one wrote since it started."""
        if not self.added:
            return
        traces = {**self._read(), **self.traces, **self.added}
        with lzma.open(self.path + ".part", "wt") as f:
            json.dump({"torch": torch.__version__, "torchvision": torchvision.__version__,
                       "digest": self.digest, "traces": traces}, f, sort_keys=True, indent=0)
        os.replace(self.path + ".part", self.path)
        report.show(f"traces: {len(self.added)} added, {len(traces)} kept in "
                    f"{os.path.relpath(self.path)}")


class Model:
    """A corpus model, built (seeded) the first time it is needed: a model whose trace and PyTorch
    figure are both kept is never built."""

    def __init__(self, factory):
        self.factory = factory
        self.model = None

    def get(self):
        if self.model is None:
            torch.manual_seed(0)
            self.model = self.factory()
        return self.model


def check_model(report, measured, kept, binary, directory, row, counts):
    """Traces one model live (or takes its kept trace), estimates it with the binary and compares
    with PyTorch."""
    name, factory, kind = row
    model = Model(factory)
    optimizer = OPTIMIZER
    side = image_side(name)
    shape = (3, side, side)
    example = torch.randn(2, *shape)
    trace_key = [name, constructor_args(name), list(shape), optimizer, kind]
    loss_fn = segment_loss if kind == "segmentation" else None
    if kind == "segmentation":
        message = one_line_error(lambda: trace_module(model.get(), example, optimizer=optimizer))
        report.check(message is not None and "\n" not in message and "dict" in message,
                     f"{name:28s} default loss refused: {message}")

    found = None if name in FAMILIES else kept.get(trace_key)
    if found:
        parameters, text = found
        how = "trace kept"
    else:
        parameters = sum(p.numel() for p in model.get().parameters())
        start = time.monotonic()
        try:
            traced = trace_module(model.get(), example, loss_fn=loss_fn, optimizer=optimizer)
        except trainfit.Error as e:
            counts["refused"].append(name)
            report.check("\n" not in str(e), f"{name:28s} refused in one line: {e}")
            return
        text = json.dumps(traced, separators=(",", ":"))
        del traced
        how = f"traced in {time.monotonic() - start:.1f} s"
        if name not in FAMILIES:
            kept.add(trace_key, parameters, text)
    batch = 4 if parameters > BIG_PARAMETERS else BATCH
    compare_trace(report, binary, directory, text, batch, counts,
                  name=name, label=f"{name:28s} {optimizer:5s} {side:3d}px b{batch}",
                  torch_peak=lambda: measured.get(
                      [name, constructor_args(name), list(shape), batch, optimizer, kind],
                      lambda: measure(model.get(), kind, shape, batch, optimizer)),
                  note=f"{parameters / 1e6:.1f} M params, {how}")


def compare_trace(report, binary, directory, text, batch, counts, *, name, label, torch_peak,
                  note):
    """`trainfit estimate --trace` of the trace `text` at `batch` on the cpu profile against
    torch_peak(), PyTorch's figure, within TOLERANCE; or refused in one line with exit 2.
    Counts the model's name as matched, failed or refused."""
    path = os.path.join(directory, f"{name}.trace.json")
    with open(path, "w") as f:
        f.write(text)
    proc = subprocess.run([binary, "estimate", "--trace", path, "--batch", str(batch),
                           "--device-profile", "cpu", "--json"], capture_output=True, text=True)
    os.unlink(path)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        counts["refused"].append(name)
        report.check(proc.returncode == 2 and len(lines) == 1,
                     f"{label} refused in one line (exit {proc.returncode}): {lines}")
        return
    predicted = json.loads(proc.stdout)["peak_allocated_bytes"]
    measured = torch_peak()
    error = (predicted - measured) / measured
    ok = abs(error) <= TOLERANCE
    counts["matched" if ok else "failed"].append(name)
    report.check(ok, f"{label} torch {measured:>14,} trainfit {predicted:>14,} {error:+.3%} "
                     f"({note})")


class _Shared(Measured):
    """The kept figures of every part of the corpus in one file: before writing, it takes in
    what parts running beside it wrote since it started."""

    def save(self, report):
        try:
            with open(self.path) as f:
                data = json.load(f)
            if data.get("digest") == self.digest:
                self.figures.update(data["figures"])
        except (OSError, ValueError, KeyError, AttributeError):
            pass
        super().save(report)


class _Quietly:
    """A report that keeps nothing: for saving the kept figures after every model, so that a run
    stopped part way keeps what it measured."""

    def show(self, line):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainfit", required=True, help="the trainfit binary")
    ap.add_argument("--set", choices=("families", "all"), default="all",
                    help="all: every model (the test command's); families: the smallest model "
                         "of each family, those traced on every run")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--shard", default="1/1", metavar="K/N",
                    help="check the K-th of N equal parts of the corpus (for parallel runs)")
    ap.add_argument("--threads", type=int, default=1, help="PyTorch's threads (default 1)")
    ap.add_argument("--remeasure", action="store_true", help="ignore the kept PyTorch figures")
    ap.add_argument("--retrace", action="store_true",
                    help="trace every model, ignoring the kept traces (and keep the new ones)")
    args = ap.parse_args()
    rows = corpus()
    if args.set == "families":
        rows = [r for r in rows if r[0] in FAMILIES]
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {n for n, _, _ in rows})
        if unknown:
            sys.exit(f"error: not in this torchvision: {', '.join(unknown)}")
        rows = [r for r in rows if r[0] in wanted]
    try:
        k, n = (int(v) for v in args.shard.split("/"))
        if not 1 <= k <= n:
            raise ValueError
    except ValueError:
        sys.exit(f"error: --shard '{args.shard}' is not K/N with 1 <= K <= N")
    rows = rows[k - 1::n]
    # One thread by default: the check runs beside other tests, and PyTorch's threads waiting
    # on busy cores slow it many times over. The bytes do not depend on the thread count.
    torch.set_num_threads(args.threads)
    report = Report(f"torchvision {torchvision.__version__} corpus ({args.set}, part "
                    f"{args.shard}): live models traced, estimated by trainfit vs PyTorch "
                    f"{torch.__version__} (CPU), within "
                    f"{TOLERANCE:.0%}")
    measured = _Shared("torchvision", os.path.join(HERE, "torchvision_cases.py"), args.remeasure)
    kept = KeptTraces(KEPT_TRACES, args.retrace)
    if kept.stale:
        report.show(f"the traces kept in {os.path.relpath(KEPT_TRACES)} are from another PyTorch, "
                    "torchvision or tracer: every model is traced (about 20 minutes on two "
                    "cores); commit the new file")
    counts = {"matched": [], "failed": [], "refused": []}
    start = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as directory:
            for row in rows:
                check_model(report, measured, kept, args.trainfit, directory, row, counts)
                measured.save(_Quietly())
                gc.collect()
    finally:
        kept.save(report)
    measured.save(report)
    classification = sum(1 for _, _, kind in rows if kind == "classification")
    report.show(f"coverage: {len(counts['matched'])} of {len(rows)} models match within "
                f"{TOLERANCE:.0%} ({classification} classification, "
                f"{len(rows) - classification} segmentation); refused in one line: "
                f"{', '.join(counts['refused']) or 'none'}; {time.monotonic() - start:.0f} s")
    report.finish()


if __name__ == "__main__":
    main()
