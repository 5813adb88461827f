"""trainfit's reports as dicts, computed in this process by the C++ library (pybind11).

    import trainfit
    report = trainfit.estimate("resnet50", batch=64, gpu="rtx4090")
    report["peak_allocated_bytes"], report["fits"]
    trainfit.estimate(trace="model.trace.json", batch=256, gpu="h100", expandable_segments=True)
    trainfit.fit(trace=trainfit.trace(model, make_batch, loss_fn, make_optimizer), gpu="all")

Each function returns what `trainfit estimate --json` (or `fit --json`) prints for the same
options. Keywords are the command's options with `_` for `-` (`optimizer_impl="fused"`): `True`
passes a flag, `None` and `False` leave it out, a list repeats the option
(`checkpoint=["layer3", "layer4"]`), a dict gives key=value pairs (`set={"num_classes": 10}`)
and a tuple of ints is a shape (`input=(3, 160, 160)`).

The binding is `_trainfit*.so`, built by `scripts/setup.sh` into build/release/python/trainfit;
it is found there, next to this file (an installed package), or in $TRAINFIT_BUILD/python/trainfit.
"""
import glob
import importlib.util
import json
import os
import tempfile


class Error(ValueError):
    """trainfit refused the request; the message names the problem and a hint."""


def estimate(model=None, *, trace=None, batch=1, **options):
    """Peak GPU memory of two training iterations: allocated, reserved, device used, breakdown.

    model: a zoo name (`trainfit models`); or trace: a trace file's path, or the dict that
    trainfit.trace returned. Other keywords: see `trainfit estimate --help`.
    """
    return _report("estimate", model, trace, dict(options, batch=batch))


def fit(model=None, *, trace=None, **options):
    """Largest batch per GPU (gpu="all" for every catalog GPU), what_if=True to rank the memory
    knobs, target_batch=N for the cheapest way to fit N. See `trainfit fit --help`."""
    return _report("fit", model, trace, options)


def _report(command, model, trace, options):
    args = ["trainfit", command, "--json"]
    if model is not None:
        args += ["--model", str(model)]
    with tempfile.TemporaryDirectory(prefix="trainfit-") as scratch:
        if isinstance(trace, dict):
            path = os.path.join(scratch, "trace.json")
            with open(path, "w") as f:
                json.dump(trace, f)
            trace = path
        if trace is not None:
            args += ["--trace", os.fspath(trace)]
        for key, value in options.items():
            args += _flag(key, value)
        code, out, err = _binding().run(args)
    if code != 0:
        raise Error(err.strip().removeprefix("trainfit: error: "))
    return json.loads(out)


def _flag(key, value):
    flag = "--" + key.replace("_", "-")
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, dict):
        return [a for k, v in value.items() for a in (flag, f"{k}={v}")]
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [flag, "x".join(str(v) for v in value)]
        return [a for v in value for a in _flag(key, v)]
    return [flag, str(value)]


_module = None


def _binding():
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
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _module = module
            return module
    raise ImportError("trainfit's binding (_trainfit*.so) is not built: run scripts/setup.sh, "
                      "or set TRAINFIT_BUILD to the CMake build folder that has it "
                      f"(looked in {', '.join(os.path.normpath(p) for p in places)})")
