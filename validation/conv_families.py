"""The convolution families no GPU recording covers yet, measured on a lent GPU in one call.

trainfit's cuDNN workspaces come from H100 recordings of dense 1-D and 2-D NCHW convolutions in
fp32 and fp16 (src/graph/cudnn_measured.inc); every other problem takes the rule and, at its
bound, the largest ratio any family reached (src/graph/device_rules.h, Note [Workspace bounds]).
This records what would replace those guesses: for each family (dense, grouped, depthwise;
1-D, 2-D, 3-D; strided, dilated), dtype (fp32, bf16, fp16) and layout (channels_first,
channels_last), one convolution at two batches, forward and backward, with the allocator's
events, so that validation/cudnn_workspaces.py can read each call's workspace the way it reads
the model runs; and seed 000's ACT at batch 8 in fp32 through gpu_cases.py's own case.

    python3 validation/conv_families.py --out families.json             # on the GPU, < 8 min
    python3 validation/conv_families.py --device cpu --out /tmp/f.json  # dry run: shapes only

Each problem runs in this process after torch.cuda.empty_cache(): the events between its
forward's output and the end of its backward are its own. The output lists, per problem, its
geometry, the events ([action, size]) and max_memory_allocated/reserved over the call.
"""
import argparse
import json
import sys
import time

# name, dims, in channels, out channels, groups, kernel, stride, dilation, spatial size
FAMILIES = [
    ("dense-2d", 2, 64, 128, 1, 3, 1, 1, 56),
    ("dense-2d-stride2", 2, 128, 256, 1, 3, 2, 1, 28),
    ("dense-2d-dilated", 2, 64, 64, 1, 3, 1, 2, 56),
    ("pointwise-2d", 2, 256, 64, 1, 1, 1, 1, 28),
    ("grouped-2d", 2, 128, 128, 32, 3, 1, 1, 28),      # ResNeXt's 32 groups
    ("depthwise-2d", 2, 96, 96, 96, 3, 1, 1, 56),      # MobileNet's
    ("depthwise-2d-stride2", 2, 144, 144, 144, 5, 2, 1, 56),
    ("dense-1d", 1, 256, 512, 1, 5, 1, 1, 64),         # Diffusion's U-Net
    ("dense-3d", 3, 64, 64, 1, 3, 1, 1, 16),           # r3d_18's
    ("depthwise-3d", 3, 64, 64, 64, 3, 1, 1, 16),
]
BATCHES = (8, 32)
DTYPES = ("float32", "bfloat16", "float16")


def problems():
    for name, dims, cin, cout, groups, k, stride, dilation, size in FAMILIES:
        for dtype in DTYPES:
            for layout in ("channels_first", "channels_last"):
                if layout == "channels_last" and dims == 1:
                    continue  # no channels_last for 3-D tensors
                for batch in BATCHES:
                    yield {"family": name, "dims": dims, "in_channels": cin, "out_channels": cout,
                           "groups": groups, "kernel": k, "stride": stride,
                           "dilation": dilation, "size": size, "dtype": dtype,
                           "layout": layout, "batch": batch}


def run(p, torch, device):
    conv_class = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[p["dims"]]
    dtype = getattr(torch, p["dtype"])
    conv = conv_class(p["in_channels"], p["out_channels"], p["kernel"], stride=p["stride"],
                      padding=p["dilation"] * (p["kernel"] // 2), dilation=p["dilation"],
                      groups=p["groups"]).to(device=device, dtype=dtype)
    x = torch.randn(p["batch"], p["in_channels"], *([p["size"]] * p["dims"]), device=device,
                    dtype=dtype, requires_grad=True)
    if p["layout"] == "channels_last":
        fmt = torch.channels_last if p["dims"] == 2 else torch.channels_last_3d
        conv = conv.to(memory_format=fmt)
        x = x.detach().to(memory_format=fmt).requires_grad_()
    record = {"problem": p, "x": list(x.shape), "weight": list(conv.weight.shape)}
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(max_entries=100000)
    y = conv(x)
    y.backward(torch.ones_like(y))
    record["y"] = list(y.shape)
    if cuda:
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        record["events"] = [[e["action"], e["size"]]
                            for trace in snapshot["device_traces"] for e in trace
                            if e["action"] in ("alloc", "free_completed", "segment_alloc")]
        record["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        record["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=420, help="stop after this long")
    args = ap.parse_args()
    import torch
    start = time.time()
    records = []
    for p in problems():
        if time.time() - start > args.budget_s:
            print(f"stopped at the time budget after {len(records)} problems", file=sys.stderr)
            break
        if args.device == "cpu" and (p["dtype"] != "float32" or p["batch"] != BATCHES[0]):
            continue  # the dry run checks that each family builds and runs
        try:
            records.append(run(p, torch, args.device))
        except RuntimeError as e:  # a dtype or layout the build lacks: say so and go on
            records.append({"problem": p, "error": str(e).splitlines()[0]})
    device = {"name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None}
    with open(args.out, "w") as f:
        json.dump({"device": device, "records": records}, f)
    failed = sum("error" in r for r in records)
    print(f"{len(records)} problems recorded ({failed} refused) in {time.time() - start:.0f} s "
          f"to {args.out}")


if __name__ == "__main__":
    main()
