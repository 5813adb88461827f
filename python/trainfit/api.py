"""trainfit's reports as dicts, computed in this process by the C++ library (pybind11).

    import trainfit
    report = trainfit.estimate("resnet50", batch=64, gpu="rtx4090")
    report["peak_allocated_bytes"], report["fits"]
    trace = trainfit.load_trace("model.trace.json")          # parsed and fitted once
    trainfit.estimate(trace=trace, batch=256, gpu="h100-80gb", expandable_segments=True)
    trainfit.fit(trace=trace, gpu="all")
    trainfit.compare([dict(model="act", batch=48), dict(model="diffusion", batch=64)],
                     gpu="rtx4090")
    trainfit.summary("vit_b_16", depth=2)

Each function returns what the command prints with --json for the same options; the keywords
are the command's options with `_` for `-`. Bad input raises trainfit.Error with the command's
one-line message and hint.

The binding is `_trainfit*.so`, built by `scripts/setup.sh` into build/release/python/trainfit;
it is found next to this file (an installed package), in build/release, or in
$TRAINFIT_BUILD/python/trainfit.
"""
from __future__ import annotations

import glob
import html as _html
import importlib.util
import inspect
import json
import os
from types import ModuleType
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

Shape = Union[Tuple[int, ...], Sequence[int], str]  # (3, 224, 224) or "3x224x224"
Size = Union[int, str]  # bytes, or "24GiB"
TraceSource = Union["Trace", str, "os.PathLike[str]", Mapping[str, Any]]


class Report(Dict[str, Any]):
    """A report as `--json` prints it (a dict); in a notebook it shows as the `--html` page."""

    def __init__(self, data: Mapping[str, Any], html: Optional[Callable[[], str]] = None):
        """data: the report's fields; html: makes the HTML page when a notebook asks."""
        super().__init__(data)
        self._html = html

    def _repr_html_(self) -> Optional[str]:
        """The HTML report in an iframe, so that its style stays inside it."""
        if self._html is None:
            return None
        page = _html.escape(self._html(), quote=True)
        return (f'<iframe srcdoc="{page}" style="width:100%;height:760px;border:0" '
                'title="trainfit report"></iframe>')


class Error(ValueError):
    """trainfit refused the request; the message names the problem and a hint."""


class Trace:
    """A trace parsed and fitted once; pass it as `trace=` to any number of estimates."""

    def __init__(self, handle: Any):
        """handle: the binding's loaded trace."""
        self._handle = handle

    @property
    def model(self) -> str:
        """The traced model's name."""
        return str(self._handle.model)

    @property
    def batches(self) -> list[int]:
        """The batch sizes it was traced at."""
        return list(self._handle.batches)

    @property
    def source(self) -> str:
        """Where the trace came from: its path."""
        return str(self._handle.source)

    def __repr__(self) -> str:
        """The trace's model, batch sizes and source."""
        return repr(self._handle)


def load_trace(source: Union[str, "os.PathLike[str]", Mapping[str, Any]]) -> Trace:
    """A trace file's path, or the dict trainfit.trace returned, parsed and fitted once."""
    if isinstance(source, Mapping):
        name = f"<trace of {source.get('model', 'a model')}>"
        return Trace(_binding().load_trace(json.dumps(source), name))
    path = os.fspath(source)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise Error(f"cannot open trace '{path}' ({e.strerror}) (hint: give the path of a file "
                    "written by `python3 -m trainfit.trace --out`)") from None
    return Trace(_binding().load_trace(text, path))


def estimate(model: Union[str, Any, None] = None, example_batch: Any = None, *,
             loss_fn: Optional[Callable[[Any, Any], Any]] = None,
             hf_config: Union[str, "os.PathLike[str]", None] = None,
             trace: Optional[TraceSource] = None, set: Optional[Mapping[str, Any]] = None,
             batch: int = 1, input: Optional[Shape] = None, seq_len: Optional[int] = None,
             precision: str = "fp32", device_profile: str = "cuda",
             freeze: Union[str, Sequence[str], None] = None,
             lora: Union[str, Mapping[str, Any], None] = None,
             optimizer: Union[str, Callable[[Any], Any], None] = None,
             optimizer_impl: str = "default", default_device: str = "cpu",
             weight_decay: Optional[float] = None,
             checkpoint: Union[str, Sequence[str], None] = None, checkpoint_reentrant: bool = False,
             grad_accum: int = 1, grad_scaler_skips: int = 0, cudnn_benchmark: bool = False,
             zero_grad_set_to_none: bool = True, loop: str = "held", gpus: int = 1, nodes: int = 1,
             network: Optional[float] = None, strategy: Optional[str] = None,
             bucket_cap_mb: Optional[float] = None, gradient_as_bucket_view: bool = False,
             fsdp_wrap: Union[str, Sequence[str], None] = None, fsdp_sharding: Optional[str] = None,
             fsdp_mixed_precision: Optional[str] = None, find_unused_parameters: bool = False,
             broadcast_buffers: bool = True, tf32: bool = False,
             memory_format: str = "channels_first", dataset_size: Optional[int] = None,
             baseline_batch: Optional[int] = None, baseline_lr: Optional[float] = None,
             gpu: Optional[str] = None, gpu_memory: Optional[Size] = None,
             gpu_profile: Union[str, "os.PathLike[str]", None] = None, link: Optional[str] = None,
             bus_bandwidth: Optional[float] = None, cuda_context: Optional[Size] = None,
             expandable_segments: bool = False, max_split_size: Optional[Size] = None,
             margin: Union[float, str, None] = None, explain: bool = False,
             timeline: Union[str, "os.PathLike[str]", None] = None) -> Report:
    """Peak GPU memory of two training iterations: allocated, reserved, device used, breakdown;
    with a gpu, the predicted step time (step_time_s, samples_per_s, time_breakdown). Where cuDNN
    workspaces were not measured on the card, peak_reserved_upper_bytes and
    device_used_upper_bytes bound the central figures (workspace_sources says which were).

    model: a zoo name (`trainfit models`); or a live torch.nn.Module with example_batch, what it
    is called with (traced here on the CPU, nothing written; loss_fn(output, inputs) when the
    default cross-entropy on random classes does not apply; optimizer: the one to trace with,
    a name or a function of the parameters); or trace: a Trace, a trace file's path, or the
    dict trainfit.trace returned; or hf_config: a Hugging Face model's config.json (Llama,
    Mistral, Qwen2, Qwen3, Gemma), read offline. set: the model's keys ({"num_classes": 10}). lora:
    peft's LoRA on the model's Linear modules, as a dict of LoraConfig's fields ({"r": 16,
    "alpha": 32, "dropout": 0.05, "target": ["q_proj", "v_proj"]}) or --lora's text
    ("r=16,target=all-linear"); {"quant": "nf4"} is QLoRA's 4-bit base. input: CxHxW of image
    models; seq_len: tokens of sequence models. precision: fp32, amp-fp16, amp-bf16 or bf16 (a
    live model under amp-* is traced under the profile's autocast; a trace takes the precision
    it was traced in). device_profile: cuda (PyTorch 2.x) or cpu (PyTorch 1.13 CPU kernels). optimizer: sgd,
    momentum, adam, adamw, adam8bit, adamw8bit, paged_adamw or paged_adamw8bit (default: the
    model's preset, else adamw);
    optimizer_impl: default, foreach, fused or loop. default_device: "cuda" where the training
    script calls torch.set_default_device("cuda"): its mode slows every call into torch, and
    Adam's step counters then live on the GPU and are read back with .item() each step.
    checkpoint: module patterns under
    activation checkpointing ("encoder.layers.*"), non-reentrant unless checkpoint_reentrant
    (use_reentrant=True, transformers' default). gpu: a name from `trainfit gpus`, or
    gpu_memory for another card. gpu_profile: the file `python3 -m trainfit.calibrate` wrote on
    your GPU, whose timings replace the catalog's step-time constants. margin: the share of its
    memory kept free (0.05 or "5%"). tf32: fp32 matmuls in TF32 (convolutions use it by
    default). memory_format: channels_first or channels_last. cudnn_benchmark: as
    torch.backends.cudnn.benchmark = True (the first iteration times every cuDNN plan).
    grad_scaler_skips: under amp-fp16, the first optimizer steps GradScaler skips (inf
    gradients at its initial scale), as a run's first iterations measure.
    zero_grad_set_to_none=False: the script calls optimizer.zero_grad(set_to_none=False), so the
    gradients stay allocated through the next forward (one GPU only). loop: "held" (the
    loop's locals hold the batch, output and loss to the step's end) or "scoped" (a step
    function makes the batch and returns only the loss). dataset_size: samples in an epoch,
    for epoch_time_s. gpus: data-parallel GPUs, batch each (memory figures are one rank's);
    strategy: ddp (the default with gpus > 1), zero1 or fsdp (fsdp_wrap: module patterns wrapped
    as FSDP units, "encoder.layers.*"; fsdp_sharding: full_shard or shard_grad_op;
    fsdp_mixed_precision: "bf16" for MixedPrecision in bfloat16 on an fp32 model);
    bucket_cap_mb, gradient_as_bucket_view,
    find_unused_parameters and broadcast_buffers: DistributedDataParallel's arguments; the
    step time then includes the gradients' all-reduce over `link` (pcie3, pcie4, pcie5,
    nvlink2, nvlink3, nvlink4; default: the GPU's usual one) or at bus_bandwidth GB/s
    (nccl-tests' busbw); nodes: machines of `gpus` GPUs each, joined by `network` Gbit/s per
    node (default 100).
    baseline_batch, baseline_lr: the effective batch and learning rate a paper or config trained
    with; the report's "scaling" says what reaches that batch and scales the rate to this one.
    explain: list the largest tensors alive at the peak. timeline: write
    allocated and reserved bytes after every event to this CSV file.
    """
    if model is not None and not isinstance(model, str):
        return _live("estimate", locals())
    if example_batch is not None or loss_fn is not None:
        raise Error("example_batch and loss_fn go with a torch.nn.Module (hint: "
                    "trainfit.estimate(model, example_batch, batch=...))")
    options = _request_options(locals(), ("explain", "timeline", "example_batch", "loss_fn"))
    text, csv = _binding().estimate(options, explain, timeline is not None)
    if timeline is not None:
        with open(timeline, "w", encoding="utf-8") as f:
            f.write(csv)
    return _report(text, lambda: str(_binding().estimate_html(dict(options))))


def fit(model: Union[str, Any, None] = None, example_batch: Any = None, *,
        loss_fn: Optional[Callable[[Any, Any], Any]] = None,
        hf_config: Union[str, "os.PathLike[str]", None] = None, trace: Optional[TraceSource] = None,
        set: Optional[Mapping[str, Any]] = None, batch: Optional[int] = None,
        input: Optional[Shape] = None, seq_len: Optional[int] = None, precision: str = "fp32",
        device_profile: str = "cuda", freeze: Union[str, Sequence[str], None] = None,
        lora: Union[str, Mapping[str, Any], None] = None, optimizer: Optional[str] = None,
        optimizer_impl: str = "default", default_device: str = "cpu",
        weight_decay: Optional[float] = None, checkpoint: Union[str, Sequence[str], None] = None,
        checkpoint_reentrant: bool = False, grad_accum: int = 1, grad_scaler_skips: int = 0,
        cudnn_benchmark: bool = False, zero_grad_set_to_none: bool = True, loop: str = "held",
        gpus: int = 1, nodes: int = 1, network: Optional[float] = None,
        strategy: Optional[str] = None, bucket_cap_mb: Optional[float] = None,
        gradient_as_bucket_view: bool = False, fsdp_wrap: Union[str, Sequence[str], None] = None,
        fsdp_sharding: Optional[str] = None, fsdp_mixed_precision: Optional[str] = None,
        find_unused_parameters: bool = False, broadcast_buffers: bool = True, tf32: bool = False,
        memory_format: str = "channels_first", dataset_size: Optional[int] = None,
        gpu: Optional[str] = None, gpu_memory: Optional[Size] = None,
        gpu_profile: Union[str, "os.PathLike[str]", None] = None, link: Optional[str] = None,
        bus_bandwidth: Optional[float] = None, cuda_context: Optional[Size] = None,
        expandable_segments: bool = False, max_split_size: Optional[Size] = None,
        margin: Union[float, str, None] = None, what_if: bool = False,
        target_batch: Optional[int] = None, allow_model_changes: bool = False,
        rank: str = "memory") -> Report:
    """The largest batch that fits a GPU (gpu="all": every catalog GPU), keeping `margin`
    (default 5%) of its memory free.

    what_if=True ranks the memory knobs at `batch` (default: the largest batch that fits);
    target_batch=N gives the cheapest knobs that make N fit, or a gradient-accumulation plan;
    allow_model_changes lets it change the model. rank="time" puts the fastest first (what-if
    rows by step time, the target's knobs by step time, gpu="all"'s cards by samples/s).
    A live torch.nn.Module with example_batch (and loss_fn) is traced as trainfit.estimate
    does. Other keywords as for trainfit.estimate.
    """
    if model is not None and not isinstance(model, str):
        return _live("fit", locals())
    if example_batch is not None or loss_fn is not None:
        raise Error("example_batch and loss_fn go with a torch.nn.Module (hint: "
                    "trainfit.fit(model, example_batch, gpu=...))")
    options = _request_options(locals(), ("what_if", "target_batch", "allow_model_changes",
                                          "rank", "example_batch", "loss_fn"))
    def page() -> str:
        """The fit --html page of this request."""
        return str(_binding().fit(dict(options), what_if, target_batch or 0, allow_model_changes,
                                  rank, True))

    return _report(_binding().fit(dict(options), what_if, target_batch or 0,
                                  allow_model_changes, rank), page)


def launch(model: Optional[str] = None, *, gpu: str, gpus: int, baseline_batch: int,
           baseline_lr: float, hf_config: Union[str, "os.PathLike[str]", None] = None,
           set: Optional[Mapping[str, Any]] = None, input: Optional[Shape] = None,
           seq_len: Optional[int] = None, precision: str = "fp32", device_profile: str = "cuda",
           freeze: Union[str, Sequence[str], None] = None,
           lora: Union[str, Mapping[str, Any], None] = None, optimizer: Optional[str] = None,
           optimizer_impl: str = "default", default_device: str = "cpu",
           weight_decay: Optional[float] = None, checkpoint: Union[str, Sequence[str], None] = None,
           checkpoint_reentrant: bool = False, grad_scaler_skips: int = 0,
           cudnn_benchmark: bool = False, loop: str = "held", strategy: Optional[str] = None,
           bucket_cap_mb: Optional[float] = None, gradient_as_bucket_view: bool = False,
           fsdp_wrap: Union[str, Sequence[str], None] = None, fsdp_sharding: Optional[str] = None,
           fsdp_mixed_precision: Optional[str] = None, find_unused_parameters: bool = False,
           broadcast_buffers: bool = True, tf32: bool = False,
           memory_format: str = "channels_first", dataset_size: Optional[int] = None,
           gpu_profile: Union[str, "os.PathLike[str]", None] = None, link: Optional[str] = None,
           bus_bandwidth: Optional[float] = None, cuda_context: Optional[Size] = None,
           expandable_segments: bool = False, max_split_size: Optional[Size] = None,
           margin: Union[float, str, None] = None, cores: Optional[int] = None) -> Report:
    """The GPU count (1 to `gpus`), strategy, per-GPU batch and gradient accumulation that
    reproduce `baseline_batch` exactly, fastest within `gpu`'s memory, with the learning rate,
    the torchrun command and the changes the training script needs (`trainfit launch --json`).
    cores: the node's CPU cores for OMP_NUM_THREADS (default: this host's). Step times include
    the all-reduce over `link` or at `bus_bandwidth`. Other keywords as for trainfit.estimate;
    launch chooses the batch and gradient accumulation itself, for a zoo model on one node of
    a catalog GPU (no batch, grad_accum, trace, nodes, network or gpu_memory)."""
    options = _request_options(locals(), ("cores",))
    return _report(_binding().launch(options, cores or os.cpu_count() or 1))


def compare(models: Sequence[Mapping[str, Any]], **shared: Any) -> Report:
    """Several models side by side: `models` holds each one's keywords (as for
    trainfit.estimate: model= or trace=, batch=, set=, ...); `shared` keywords apply to every
    model, and a model's own value wins.

        trainfit.compare([dict(model="act", batch=48), dict(model="diffusion", batch=64)],
                         gpu="rtx4090")
    """
    requests = [_request_options({**shared, **dict(m)}, ()) for m in models]
    return _report(_binding().compare(requests))


def summary(model: Union[str, Any, None] = None, example_batch: Any = None, *,
            loss_fn: Optional[Callable[[Any, Any], Any]] = None,
            hf_config: Union[str, "os.PathLike[str]", None] = None,
            trace: Optional[TraceSource] = None, set: Optional[Mapping[str, Any]] = None,
            batch: Optional[int] = None, input: Optional[Shape] = None,
            seq_len: Optional[int] = None, precision: str = "fp32", device_profile: str = "cuda",
            freeze: Union[str, Sequence[str], None] = None,
            lora: Union[str, Mapping[str, Any], None] = None,
            optimizer: Union[str, Callable[[Any], Any], None] = None, depth: int = -1) -> Report:
    """Per module: type, output shape, parameters, bytes kept for backward (per sample and for
    the batch), down to `depth` (-1: every module).

    model: a zoo name, or a live torch.nn.Module with example_batch (traced here as
    trainfit.estimate does; batch defaults to the example's); or trace=. batch defaults to 1
    for a zoo model or a trace.
    """
    if model is not None and not isinstance(model, str):
        if batch is None and example_batch is not None:
            batch = _batch_of(example_batch)
        return _live("summary", locals())
    if example_batch is not None or loss_fn is not None:
        raise Error("example_batch and loss_fn go with a torch.nn.Module (hint: "
                    "trainfit.summary(model, example_batch))")
    if batch is None:
        batch = 1
    # A zoo model's or a trace's summary has no optimizer: it only traces a live module.
    options = _request_options(locals(), ("depth", "example_batch", "loss_fn", "optimizer"))
    return _report(_binding().summary(options, depth),
                   lambda: str(_binding().summary(dict(options), depth, True)))


def _live(command: str, given: Mapping[str, Any]) -> Report:
    """estimate, fit or summary of a live nn.Module: traced here, then reported from the trace."""
    from .live import trace_module  # imports torch, which the other calls do not need

    if given.get("example_batch") is None:
        raise Error("a torch.nn.Module needs example_batch, what it is called with (hint: "
                    f"trainfit.{command}(model, torch.randn(2, 3, 224, 224), ...))")
    if given.get("trace") is not None:
        raise Error("give a model or trace=, not both (hint: drop trace=)")
    # Under AMP the model is traced under the autocast of the device the estimate is for.
    amp = given.get("precision") in ("amp-bf16", "amp-fp16")
    traced = trace_module(given["model"], given["example_batch"], loss_fn=given.get("loss_fn"),
                          optimizer=given.get("optimizer") or "adamw",
                          autocast=(given.get("device_profile") or "cuda") if amp else None)
    options = {k: v for k, v in given.items()
               if k not in ("model", "example_batch", "loss_fn", "optimizer")}
    options["trace"] = traced
    if command == "estimate":
        return estimate(**options)
    if command == "fit":
        return fit(**options)
    return summary(**options)


def _estimate_with_timeline(**keywords: Any) -> Tuple[Report, str]:
    """trainfit.estimate's report and its timeline CSV as text, with no file (trainfit.check
    reads the first step's peaks from it). The keywords are estimate's; another is a
    TypeError, as it is there."""
    inspect.signature(estimate).bind(**keywords)
    options = _request_options(keywords, ("explain", "timeline", "example_batch", "loss_fn"))
    text, csv = _binding().estimate(options, False, True)
    return _report(text), str(csv)


def _batch_of(example_batch: Any) -> int:
    """The batch size of a live model's example batch."""
    from .live import batch_size  # imports torch, which the other calls do not need

    return batch_size(example_batch)


def _request_options(given: Mapping[str, Any], not_request: Sequence[str]) -> Dict[str, Any]:
    """The request's keywords for the binding: None left out, traces loaded, files read. The
    binding converts each value by the option table's kind (a dict of --set keys or LoRA fields
    passes as it is)."""
    options: Dict[str, Any] = {}
    for key, value in given.items():
        if key in not_request or value is None:
            continue
        if key == "trace" and not isinstance(value, Trace):
            value = load_trace(value)
        if key == "trace":
            value = value._handle
        elif key in ("set", "lora") and isinstance(value, Mapping):
            value = dict(value)
        elif key == "input" and not isinstance(value, str):
            value = list(value)
        elif key == "gpu_profile":
            value = _read_file(value, "GPU profile", "write it with `python3 -m trainfit."
                               "calibrate --out FILE` on the machine that trains")
        elif key == "hf_config":
            value = _read_file(value, "config", "give the config.json of a Hugging Face model")
        options[key] = value
    return options


def _read_file(source: Union[str, "os.PathLike[str]"], what: str, hint: str) -> Tuple[str, str]:
    """(path, text) of a file the library parses."""
    path = os.fspath(source)
    try:
        with open(path, encoding="utf-8") as f:
            return path, f.read()
    except OSError as e:
        raise Error(f"cannot open {what} '{path}' ({e.strerror}) (hint: {hint})") from None


def _report(text: str, html: Optional[Callable[[], str]] = None) -> Report:
    """A report dict from the binding's JSON text, with its HTML page made on demand."""
    return Report(json.loads(text), html)


_module: Optional[ModuleType] = None


def _binding() -> Any:
    """The compiled binding (_trainfit*.so), loaded once."""
    global _module
    if _module is not None:
        return _module
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("TRAINFIT_BUILD"):
        places = [os.path.join(os.environ["TRAINFIT_BUILD"], "python", "trainfit")]
    else:
        places = [here, os.path.join(here, "..", "..", "build", "release", "python", "trainfit")]
    for place in places:
        for path in sorted(glob.glob(os.path.join(place, "_trainfit*.so"))):
            spec = importlib.util.spec_from_file_location("trainfit._trainfit", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            setattr(module, "Error", Error)  # the binding raises the package's Error
            _module = module
            return module
    raise ImportError("trainfit's binding (_trainfit*.so) is not built: run scripts/setup.sh, "
                      "or set TRAINFIT_BUILD to the CMake build folder that has it "
                      f"(looked in {', '.join(os.path.normpath(p) for p in places)})")
