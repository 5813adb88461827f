"""cuDNN convolution workspaces, read off recorded GPU runs.

A convolution call allocates its output, then the workspace of the cuDNN plan it runs, which it
frees when the call returns; its backward allocates grad_input then backward-data's workspace,
grad_weight then backward-filter's. This walks the allocator events of each recorded run
(validation/gpu_results/<card>/snapshots.tar.xz) with the model's convolutions in call order
(the model built on the CPU, hooks on every convolution), pairs each workspace with its
convolution and direction, and writes the table trainfit uses for the problems measured
(src/graph/cudnn_measured.inc; the rule in device_rules.h covers the others):

    /usr/bin/python3 validation/cudnn_workspaces.py [--check]

--check only compares the table with the recordings and reports how well the rule alone
(trainfit's fallback) predicts them.

A workspace is an allocation freed by the very next event. The forward one is such an
allocation inside conv's own frames (_conv_forward) after the convolution's output; the
backward ones follow grad_input (backward-data) and grad_weight (backward-filter) at once.
"""
import argparse
import json
import math
import os
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SNAPSHOTS = os.path.join(HERE, "gpu_results", "NVIDIA_H100_80GB_HBM3", "snapshots.tar.xz")
TABLE = os.path.join(ROOT, "src", "graph", "cudnn_measured.inc")
BENCHMARK_TABLE = os.path.join(ROOT, "src", "graph", "cudnn_benchmark_measured.inc")
KINDS = ("forward", "backward_data", "backward_filter")
# Runs whose workspaces the walk cannot pair with their calls: ACT with three cameras under fp16
# autocast calls one backbone at two image sizes, its weight casts in between, and pairs seven
# calls of one problem with different workspaces.
UNPAIRED = {"L:act-seed000-b8-amp-fp16"}


def conv_problems(spec):
    """The run's convolutions in call order: dicts of shapes and geometry."""
    import torch
    import torchvision
    sys.path.insert(0, HERE)
    batch = spec["batch"]
    if spec["kind"] == "tv":
        model = getattr(torchvision.models, spec["model"])()
        image = spec.get("image", 224)
        example = (torch.zeros(1, 3, image, image),)
        run = lambda: model(*example)  # noqa: E731
    elif spec["kind"] == "lerobot":
        import lerobot_reference
        model, make_batch = lerobot_reference.build(spec["model"], 1, spec.get("sets") or {})
        example = make_batch()
        run = lambda: model(example)  # noqa: E731
    else:
        return None
    found = []

    def hook(module, inputs, output):
        x = inputs[0]
        spatial = x.dim() - 2
        found.append({
            # Built at batch 1: a policy that folds time or cameras into the batch runs its
            # backbone on batch x that many images.
            "name": module.path, "x": [batch * x.shape[0]] + list(x.shape[1:]),
            "y": [batch * output.shape[0]] + list(output.shape[1:]),
            "w": list(module.weight.shape), "groups": module.groups,
            "stride": list(module.stride)[:spatial], "padding": list(module.padding)[:spatial],
            "dilation": list(module.dilation)[:spatial],
            "weight_grad": module.weight.requires_grad})

    for path, module in model.named_modules():
        if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d)):
            module.path = path
            module.register_forward_hook(hook)
    with torch.no_grad():
        run()
    return found


def nbytes(shape, itemsize):
    return math.prod(shape) * itemsize


def workspaces(events, convs, itemsize):
    """{(conv index, kind): bytes} over the run's first iteration."""
    ev = [e for e in events if e[0] in ("alloc", "free_completed")]
    transient = {i for i in range(len(ev) - 1)
                 if ev[i][0] == "alloc" and ev[i + 1][0] == "free_completed" and ev[i + 1][1] == ev[i][1]}
    frame = lambda e: e[3].split(" < ")  # noqa: E731
    first_backward = next(i for i, e in enumerate(ev) if e[0] == "alloc" and e[3] == "")
    found = {}
    # Forward: after each output (its bytes, in conv's frames), the transients there are its.
    k = -1
    for i in range(first_backward):
        e = ev[i]
        if e[0] != "alloc" or not any(f.startswith("_conv_forward@") for f in frame(e)):
            continue
        if i in transient:
            if k >= 0:
                found[(k, "forward")] = e[2]
        elif k + 1 < len(convs) and e[2] == nbytes(convs[k + 1]["y"], itemsize):
            k += 1
            found[(k, "forward")] = 0  # unless a workspace follows
    # Backward: grad_weight (the weight's bytes in conv's dtype) of each convolution, last
    # first; the transient right after it, and the one right after grad_input before it.
    pos = first_backward
    end = next((i for i in range(first_backward, len(ev)) if ev[i][0] == "alloc" and ev[i][3]), len(ev))
    for c in reversed(range(len(convs))):
        conv = convs[c]
        if not conv["weight_grad"]:
            continue
        w = nbytes(conv["w"], itemsize)
        x = nbytes(conv["x"], itemsize)
        y = nbytes(conv["y"], itemsize)
        # grad_weight comes after the convolution's gradient arrived (y bytes) or after
        # grad_input (x bytes): a weight-sized gradient before either is another layer's (ACT's
        # 512x512 linears before its 1x1 input projection).
        seen = False
        j = pos
        while j < end and not (seen and ev[j][0] == "alloc" and ev[j][2] == w
                               and j not in transient):
            seen = seen or (ev[j][0] == "alloc" and ev[j][2] in (x, y) and j not in transient)
            j += 1
        if j >= end:
            break
        nxt = next((t for t in range(j + 1, end) if ev[t][0] == "alloc"), None)
        found[(c, "backward_filter")] = ev[nxt][2] if nxt in transient else 0
        g = max((t for t in range(pos, j) if ev[t][0] == "alloc" and ev[t][2] == x
                 and t not in transient), default=None)
        if g is not None:
            nxt = next((t for t in range(g + 1, j) if ev[t][0] == "alloc"), None)
            # A gradient that arrived out of order is copied dense after grad_input.
            if nxt is not None and nxt not in transient and ev[nxt][2] == y:
                nxt = next((t for t in range(nxt + 1, j) if ev[t][0] == "alloc"), None)
            found[(c, "backward_data")] = ev[nxt][2] if nxt in transient else 0
        pos = j + 1
        if itemsize == 2:
            # Under autocast the weight's fp16 gradient is cast into its fp32 .grad next: step
            # past it, lest the next convolution take it for its own.
            cast = next((t for t in range(j + 1, min(j + 12, end)) if ev[t][0] == "alloc"
                         and ev[t][2] == 2 * w and t not in transient), None)
            if cast is not None:
                pos = cast + 1
    return found


def benchmark_searches(events, convs, itemsize):
    """{(conv index, kind): (trial, chosen)} of a benchmark-mode run's first iteration: each
    problem's first call allocates the largest candidate's workspace (the trial), frees it, and
    empties the cache (segment_free events) before running the fastest plan's (the chosen)."""
    ev = [e for e in events if e[0] in ("alloc", "free_completed", "segment_free")]
    transient = {i for i in range(len(ev) - 1)
                 if ev[i][0] == "alloc" and ev[i + 1][0] == "free_completed" and ev[i + 1][1] == ev[i][1]}
    first_backward = next(i for i, e in enumerate(ev) if e[0] == "alloc" and e[3] == "")
    second = next(i for i, e in enumerate(ev) if i > first_backward and e[0] == "alloc" and e[3]
                  and e[3].split(" < ")[0].startswith("step_loss"))

    def search_after(i, end):
        """(trial, chosen) of the call whose result was allocated at i, or None if cached."""
        allocs = [t for t in range(i + 1, end) if ev[t][0] == "alloc"]
        if not allocs or allocs[0] not in transient:
            return None
        t = allocs[0]
        freed = t + 2 < end and ev[t + 2][0] == "segment_free"
        if not freed:
            return None
        chosen = allocs[1] if len(allocs) > 1 and allocs[1] in transient else None
        return ev[t][2], ev[chosen][2] if chosen is not None else 0

    found = {}
    k = -1
    for i in range(first_backward):
        e = ev[i]
        if e[0] != "alloc" or i in transient or not any(f.startswith("_conv_forward@") for f in e[3].split(" < ")):
            continue
        if k + 1 < len(convs) and e[2] == nbytes(convs[k + 1]["y"], itemsize):
            k += 1
            nxt = next((t for t in range(i + 1, first_backward) if ev[t][0] == "alloc"), first_backward)
            result = search_after(i, next((t for t in range(nxt + 1, first_backward)
                                           if ev[t][0] == "alloc" and t not in transient), first_backward))
            if result:
                found[(k, "forward")] = result
    pos = first_backward
    for c in reversed(range(len(convs))):
        conv = convs[c]
        w = nbytes(conv["w"], itemsize)
        j = pos
        while j < second and not (ev[j][0] == "alloc" and ev[j][2] == w and j not in transient):
            j += 1
        if j >= second:
            break
        stop = next((t for t in range(j + 1, second) if ev[t][0] == "alloc" and t not in transient), second)
        if (r := search_after(j, stop)):
            found[(c, "backward_filter")] = r
        x = nbytes(conv["x"], itemsize)
        g = max((t for t in range(pos, j) if ev[t][0] == "alloc" and ev[t][2] == x and t not in transient),
                default=None)
        if g is not None and (r := search_after(g, j)):
            found[(c, "backward_data")] = r
        pos = j + 1
    return found


def key_of(conv, kind, itemsize):
    """kind, itemsize, N, C, K, groups, H, W, kernel, stride, padding, dilation (1-D as H = 1)."""
    x, w = conv["x"], conv["w"]
    spatial = len(x) - 2
    in_hw = [1] * (2 - spatial) + list(x[2:])
    kernel = [1] * (2 - spatial) + list(w[2:])
    stride = [1] * (2 - spatial) + conv["stride"]
    padding = [0] * (2 - spatial) + conv["padding"]
    dilation = [1] * (2 - spatial) + conv["dilation"]
    return (KINDS.index(kind), itemsize, x[0], x[1], w[0], conv["groups"], *in_hw, *kernel,
            *stride, *padding, *dilation)


def rule(conv, kind, itemsize):
    """device_rules.h's cudnn_conv_workspaces, for --check."""
    x, y, w = (nbytes(conv[k], itemsize) for k in ("x", "y", "w"))
    welem = math.prod(conv["w"])
    kernel = conv["w"][2:]
    one = all(k == 1 for k in kernel)
    pointwise = one and all(s == 1 for s in conv["stride"]) and all(p == 0 for p in conv["padding"]) \
        and all(d == 1 for d in conv["dilation"]) and conv["groups"] == 1
    plane = math.prod(conv["y"][2:])
    if pointwise and (plane * itemsize) % 16 == 0:
        return min(conv["x"][0], 64) * welem * 4 if kind == "backward_filter" else 0
    converted = x + y + 16 if one else x + y + w + 16
    if kind == "backward_filter" and not one:
        converted += min(14 * welem * 4, 9 << 20)
    return converted


def conv_of_key(key):
    """The convolution a table key describes, as conv_problems gives it."""
    _, _, n, c, k, groups, h, w, kh, kw, sh, sw, ph, pw, dh, dw = key
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return {"x": [n, c, h, w], "y": [n, k, oh, ow], "w": [k, c // groups, kh, kw],
            "stride": [sh, sw], "padding": [ph, pw], "dilation": [dh, dw], "groups": groups}


def from_larger_batch(table, small=8, large=32):
    """How device_rules.cc's estimate for a batch below every recording fares: each problem
    recorded at both batches, predicted at `small` from `large` alone. Returns (problems,
    (below, worst shortfall) of the recording scaled down by the batch ratio, the same of the
    rule held between that and the recording)."""
    block = lambda n: (n + 511) // 512 * 512  # noqa: E731  the allocator's rounding
    problems, scaled_low, bounded_low = 0, [], []
    for key, (small_bytes, *_) in table.items():
        if key[2] != small:
            continue
        other = table.get(key[:2] + (large,) + key[3:])
        if other is None:
            continue
        problems += 1
        scaled = other[0] * small // large
        bounded = min(max(rule(conv_of_key(key), KINDS[key[0]], key[1]), scaled), other[0])
        for guess, low in ((scaled, scaled_low), (bounded, bounded_low)):
            if block(guess) < block(small_bytes):
                low.append(small_bytes - guess)
    return problems, (len(scaled_low), max(scaled_low, default=0)), \
        (len(bounded_low), max(bounded_low, default=0))


# Note [Workspace bounds] (src/graph/device_rules.h): the bound of a problem no recording
# measured, fitted on recorded problems. Kept in step with cudnn_conv_bound.
BOUND_MARGIN = 1.25
BOUND_SLACK = 1024
OBSERVATIONS = os.path.join(HERE, "measured", "cudnn_observations.json.xz")


def bound_size(conv, kind, itemsize):
    """S: the converted tensors X + Y + W, and backward-filter's per-image fp32 partials."""
    size = sum(nbytes(conv[k], itemsize) for k in ("x", "y", "w"))
    if kind == "backward_filter":
        size += min(conv["x"][0], 64) * math.prod(conv["w"]) * 4
    return size


def bound_family(conv, key):
    """Direction, class (a GEMM on NCHW planes, another 1x1, larger), 1-D or 2-D, itemsize."""
    kind, itemsize = key[0], key[1]
    kernel = conv["w"][2:]
    one = all(k == 1 for k in kernel)
    pointwise = one and all(s == 1 for s in conv["stride"]) and all(p == 0 for p in conv["padding"]) \
        and all(d == 1 for d in conv["dilation"]) and conv["groups"] == 1
    gemm = pointwise and (math.prod(conv["y"][2:]) * itemsize) % 16 == 0
    one_d = key[6] == 1 and key[8] == 1 and key[10] == 1 and key[12] == 0
    return (kind, "gemm" if gemm else "1x1" if one else "larger", 1 if one_d else 2, itemsize)


def fit_bound(observations):
    """{family: largest ratio, (kind,): largest ratio of the direction} over `observations`."""
    ratios = {}
    for o in observations:
        key, conv = tuple(o["key"]), conv_of_key(o["key"])
        ratio = o["bytes"] / bound_size(conv, KINDS[key[0]], key[1])
        for f in (bound_family(conv, key), (key[0],)):
            ratios[f] = max(ratios.get(f, 0.0), ratio)
    return ratios


def bound(ratios, key, margin=BOUND_MARGIN, by_family=True):
    """The bound trainfit gives; `margin` and `by_family` (else the direction's ratio for every
    family) to see what each part of it is for."""
    conv = conv_of_key(key)
    ratio = ratios[(key[0],)]
    if by_family:
        ratio = ratios.get(bound_family(conv, key), ratio)
    central = rule(conv, KINDS[key[0]], key[1])
    return max(central, math.ceil(ratio * margin * bound_size(conv, KINDS[key[0]], key[1]))) \
        + BOUND_SLACK


def leave_one_model_out(path, margin=BOUND_MARGIN, by_family=True, report=True):
    """Fits the bound on every recorded model but one and counts the problems of that model it
    places below their recording, and those the central rule does; for each model. Returns the
    number of problems below the bound."""
    import lzma
    with lzma.open(path, "rt") as f:
        observations = json.load(f)
    model = lambda case: case.split(":", 1)[1].split("-")[0]  # noqa: E731
    block = lambda n: (n + 511) // 512 * 512  # noqa: E731  the allocator's rounding
    per_model = {}
    for o in observations:  # one per model and problem, the largest of its runs
        k = (model(o["case"]), tuple(o["key"]))
        if k not in per_model or per_model[k]["bytes"] < o["bytes"]:
            per_model[k] = o
    models = sorted({m for m, _ in per_model})
    out = print if report else (lambda *_: None)
    out(f"{len(per_model)} problems of {len(models)} models; fitted without the model, "
        f"checked on it:")
    out(f"  {'model':12s} {'problems':>8s} {'below bound':>12s} {'below rule':>11s} "
        f"{'above rule':>11s}  bound / measured")
    total_below = 0
    for m in models:
        ratios = fit_bound([o for (mm, _), o in per_model.items() if mm != m])
        test = [o for (mm, _), o in per_model.items() if mm == m]
        bound_of = lambda o: bound(ratios, tuple(o["key"]), margin, by_family)  # noqa: E731
        below = [o for o in test if block(bound_of(o)) < block(o["bytes"])]
        rules = [rule(conv_of_key(o["key"]), KINDS[o["key"][0]], o["key"][1]) for o in test]
        rule_below = sum(block(r) < block(o["bytes"]) for r, o in zip(rules, test))
        rule_above = sum(block(r) > block(o["bytes"]) for r, o in zip(rules, test))
        measured = sum(o["bytes"] for o in test)
        bounded = sum(bound_of(o) for o in test)
        out(f"  {m:12s} {len(test):8d} {len(below):12d} {rule_below:11d} {rule_above:11d}  "
            f"{bounded / measured:.2f}")
        for o in below:
            out(f"    below: {o['case']} {o['conv']} {KINDS[o['key'][0]]} {o['bytes']:,} bytes, "
                f"bound {bound_of(o):,}")
        total_below += len(below)
    return total_below


def collect(path):
    table = {}
    benchmark = {}
    per_case = []
    observed = []  # every (case, key, bytes), before the table keeps one per key
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.name.endswith(".json"):
                continue
            snap = json.load(tar.extractfile(member))
            spec = snap["spec"]
            if spec.get("cudnn_benchmark") and not spec.get("channels_last"):
                convs = conv_problems(spec)
                itemsize = 2 if spec.get("precision", "fp32") in ("amp-fp16", "amp-bf16") else 4
                for (c, kind), pair in benchmark_searches(snap["events"], convs, itemsize).items():
                    benchmark[key_of(convs[c], kind, itemsize)] = pair
                per_case.append((spec["id"], len(benchmark), len(convs)))
                continue
            if spec.get("channels_last") or spec["id"] in UNPAIRED:
                continue
            convs = conv_problems(spec)
            if not convs:
                continue
            itemsize = 2 if spec.get("precision", "fp32") in ("amp-fp16", "amp-bf16") else 4
            found = workspaces(snap["events"], convs, itemsize)
            per_case.append((spec["id"], len(found), len(convs)))
            for (c, kind), size in found.items():
                key = key_of(convs[c], kind, itemsize)
                observed.append({"case": spec["id"], "conv": convs[c]["name"], "key": list(key),
                                 "bytes": size})
                if key in table and table[key][0] != size:
                    print(f"  {spec['id']}: {convs[c]['name']} {kind} {size} where another run "
                          f"had {table[key][0]}; keeping the larger", file=sys.stderr)
                    size = max(size, table[key][0])
                table[key] = (size, rule(convs[c], kind, itemsize), convs[c]["name"], spec["id"])
    return table, benchmark, per_case, observed


HEADER = ["// Generated by validation/cudnn_workspaces.py from the H100 allocator recordings",
          "// (validation/gpu_results/NVIDIA_H100_80GB_HBM3/snapshots.tar.xz). Do not edit by hand.",
          "// kind (0 forward, 1 backward-data, 2 backward-filter), itemsize, N, C, K, groups,",
          "// H, W, kernel h, w, stride h, w, padding h, w, dilation h, w, then"]


def write(table, path, what, values):
    lines = HEADER + [f"// {what}"]
    for key in sorted(table):
        lines.append("{" + ", ".join(str(v) for v in key) + ", " + ", ".join(str(v) for v in values(table[key])) + "},")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapshots", default=SNAPSHOTS)
    ap.add_argument("--check", action="store_true", help="report; write nothing")
    ap.add_argument("--observations", metavar="FILE",
                    help="also write every workspace read off the recordings, with its case "
                         "(xz-compressed JSON: " + os.path.relpath(OBSERVATIONS, ROOT) + ")")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="check the workspace bound model by model on the kept observations "
                         f"({os.path.relpath(OBSERVATIONS, ROOT)}); needs no PyTorch")
    args = ap.parse_args()
    if args.leave_one_out:
        below = leave_one_model_out(OBSERVATIONS)
        print(f"{below} problems below the bound fitted without their model")
        # What its parts are for: the same check without the margin, and without the families.
        for label, margin, by_family in (("without the margin", 1.0, True),
                                         ("with the direction's ratio for every family", BOUND_MARGIN, False),
                                         ("with neither", 1.0, False)):
            n = leave_one_model_out(OBSERVATIONS, margin, by_family, report=False)
            print(f"  {label}: {n} below")
        sys.exit(1 if below else 0)
    table, benchmark, per_case, observed = collect(args.snapshots)
    if args.observations:
        import lzma
        with lzma.open(args.observations, "wt") as f:
            f.write("[\n" + ",\n".join(json.dumps(o, sort_keys=True) for o in observed) + "\n]\n")
    for case, found, convs in per_case:
        print(f"  {case:40s} {found:4d} workspaces of {convs} convolutions")
    block = lambda n: (n + 511) // 512 * 512  # noqa: E731  the allocator's rounding
    exact = sum(1 for v in table.values() if block(v[0]) == block(v[1]))
    over = sum(1 for v in table.values() if block(v[1]) > block(v[0]))
    under = [v for v in table.values() if block(v[1]) < block(v[0])]
    print(f"{len(table)} measured problems: the rule gives {exact} to within rounding, {over} "
          f"higher, {len(under)} lower (by {max((v[0] - v[1] for v in under), default=0):,} "
          f"bytes at most)")
    problems, scaled, bounded = from_larger_batch(table)
    print(f"{problems} problems recorded at batch 8 and 32, batch 8 from batch 32 alone: scaled "
          f"down, {scaled[0]} below the recording (by {scaled[1]:,} bytes at most); the rule "
          f"held between that and batch 32's, {bounded[0]} below (by {bounded[1]:,} at most)")
    print(f"{len(benchmark)} problems searched in benchmark mode")
    if not args.check:
        write(table, TABLE, "the workspace the call asked for", lambda v: [v[0]])
        write(benchmark, BENCHMARK_TABLE,
              "in benchmark mode the largest candidate's workspace (the trial) and the chosen plan's",
              lambda v: list(v))
        print(f"wrote {TABLE} and {BENCHMARK_TABLE}")


if __name__ == "__main__":
    main()
