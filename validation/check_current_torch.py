"""The torchvision corpus and ten small transformers decoders, traced and measured under the
PyTorch people install today (2.x), kept so that the test command checks trainfit against them
without installing it.

Debian's PyTorch, which the other checks run, is 1.13. This check takes what the current release
measured once, in a virtual environment outside the repository, and replays it:

    record  (run by a Python whose torch is 2.x, with torchvision, transformers and peft):
            every model of check_torchvision.py's corpus, built and traced as that check does
            (trainfit.live.trace_module: batch 2 and 3, the default loss or the segmenters'
            per-pixel one, SGD), and the peak of live tensor bytes PyTorch reaches over two
            training iterations at the check's batch (torchvision_cases.measure); likewise the
            decoders of LM_CASES, traced on {input_ids, labels} with their own loss and AdamW,
            measured at LM_BATCH (harness.training_peak). Each model's
            trace, figure and parameter count go to a part file (--parts DIR, one per --shard,
            appended model by model so that a stopped run resumes); --merge DIR writes them,
            with the versions that made them, to validation/measured/current-torch.json.xz.
    replay  (the default; Debian's PyTorch 1.13 is enough): for every kept model,

                trainfit estimate --trace FILE --batch B --device-profile cpu --json

            must match the kept PyTorch figure within 1%, as in check_torchvision.py, or be
            refused by trainfit in one line with exit 2; a model the tracer refused when it was
            recorded is shown with the tracer's message.

    python3 -m venv /tmp/torch-current
    /tmp/torch-current/bin/pip install torch torchvision transformers peft
    /tmp/torch-current/bin/python validation/check_current_torch.py record --parts /tmp/parts \\
        [--shard 1/2] [--only resnet18,vit_b_16]
    /tmp/torch-current/bin/python validation/check_current_torch.py record --merge /tmp/parts
    /usr/bin/python3 validation/check_current_torch.py --trainfit build/release/trainfit
"""
import argparse
import glob
import json
import lzma
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = os.path.join(HERE, "measured", "current-torch.json.xz")
TOLERANCE = 0.01  # as check_torchvision.py


# ---- record (torch 2.x) -----------------------------------------------------------------------

def record_model(row):
    """What one corpus model gives under this PyTorch: its trace (or the tracer's refusal), its
    parameter count, the batch it is checked at and PyTorch's peak there."""
    import torch
    from trainfit.live import trace_module

    import check_torchvision as tv
    from torchvision_cases import measure, segment_loss

    name, factory, kind = row
    torch.manual_seed(0)
    model = factory()
    side = tv.image_side(name)
    shape = (3, side, side)
    entry = {"name": name, "kind": kind, "shape": list(shape),
             "constructor": tv.constructor_args(name), "optimizer": tv.OPTIMIZER,
             "parameters": sum(p.numel() for p in model.parameters())}
    entry["batch"] = 4 if entry["parameters"] > tv.BIG_PARAMETERS else tv.BATCH
    if traced_into(entry, lambda: trace_module(
            model, torch.randn(2, *shape), optimizer=tv.OPTIMIZER,
            loss_fn=segment_loss if kind == "segmentation" else None)):
        entry["torch_peak"] = measure(model, kind, shape, entry["batch"], tv.OPTIMIZER)
    return entry


def traced_into(entry, trace):
    """Puts the trace that trace() returns in entry (as JSON text, with the seconds it took), or
    the tracer's one-line refusal; whether it traced."""
    import trainfit

    start = time.monotonic()
    try:
        traced = trace()
    except trainfit.Error as e:
        entry["refused"] = str(e)
        return False
    entry["trace"] = json.dumps(traced, separators=(",", ":"))
    entry["trace_seconds"] = round(time.monotonic() - start, 1)
    return True


# Small decoders of the families trainfit builds from a config.json, each as transformers builds
# it (AutoModelForCausalLM.from_config), trained on random token ids with labels of their own,
# as a user's fine-tuning step calls it: model(input_ids=..., labels=...).loss, AdamW.
LM_SEQ = 64
LM_BATCH = 6
LM_VOCAB = 2048
LM_CASES = {
    # name: (config class, attention, dtype, LoRA on q_proj and v_proj, gradient checkpointing)
    "llama-sdpa": ("LlamaConfig", "sdpa", "float32", False, False),
    "llama-eager": ("LlamaConfig", "eager", "float32", False, False),
    "llama-sdpa-bf16": ("LlamaConfig", "sdpa", "bfloat16", False, False),
    "llama-sdpa-lora": ("LlamaConfig", "sdpa", "float32", True, False),
    "llama-sdpa-bf16-lora": ("LlamaConfig", "sdpa", "bfloat16", True, False),
    "llama-sdpa-checkpoint": ("LlamaConfig", "sdpa", "float32", False, True),
    "qwen2-sdpa": ("Qwen2Config", "sdpa", "float32", False, False),
    "qwen3-sdpa": ("Qwen3Config", "sdpa", "float32", False, False),
    "mistral-sdpa": ("MistralConfig", "sdpa", "float32", False, False),
    "gemma2-eager": ("Gemma2Config", "eager", "float32", False, False),
}


def lm_model(name):
    """The decoder LM_CASES[name] describes, seeded, in training mode."""
    import peft
    import torch
    import transformers

    config_class, attention, dtype, lora, checkpoint = LM_CASES[name]
    config = getattr(transformers, config_class)(
        vocab_size=LM_VOCAB, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
        use_cache=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=attention, dtype=getattr(torch, dtype))
    if checkpoint:
        model.gradient_checkpointing_enable()
    if lora:
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=8, lora_alpha=16, lora_dropout=0.05, target_modules=["q_proj", "v_proj"]))
    model.train()
    return model


def record_lm(name):
    """One decoder's trace (trainfit.live.trace_module on {input_ids, labels} at batch 2 and 3,
    loss_fn the model's own loss) and PyTorch's peak at LM_BATCH over two AdamW steps."""
    import torch
    from trainfit.live import trace_module

    from harness import training_peak
    from torch_models import Case

    model = lm_model(name)
    entry = {"name": "lm:" + name, "kind": "language", "optimizer": "adamw",
             "shape": [LM_SEQ], "batch": LM_BATCH, "case": list(LM_CASES[name]),
             "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    ids = torch.randint(0, LM_VOCAB, (2, LM_SEQ))
    if not traced_into(entry, lambda: trace_module(
            model, {"input_ids": ids, "labels": ids.clone()},
            loss_fn=lambda output, inputs: output.loss, optimizer="adamw")):
        return entry

    class Step(torch.nn.Module):
        """model(input_ids=, labels=) as the tracer calls it, for the harness's model(*inputs)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, labels):
            return self.inner(input_ids=input_ids, labels=labels)

    def make_batch():
        return [torch.randint(0, LM_VOCAB, (LM_BATCH, LM_SEQ)),
                torch.randint(0, LM_VOCAB, (LM_BATCH, LM_SEQ))], []

    entry["torch_peak"], _ = training_peak(Case(Step(model), [], [], lambda output: output.loss),
                                           "adamw", make_batch)
    return entry


def record(args):
    import gc

    import torch
    import torchvision

    import check_torchvision as tv

    if int(torch.__version__.split(".")[0]) < 2:
        sys.exit(f"error: record runs under PyTorch 2.x; this is {torch.__version__} "
                 "(hint: a virtual environment with pip install torch torchvision transformers "
                 "peft)")
    import peft
    import transformers

    os.makedirs(args.parts, exist_ok=True)
    jobs = [(row[0], lambda row=row: record_model(row)) for row in tv.corpus()]
    jobs += [("lm:" + n, lambda n=n: record_lm(n)) for n in LM_CASES]
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {n for n, _ in jobs})
        if unknown:
            sys.exit(f"error: not a case: {', '.join(unknown)}")
        jobs = [j for j in jobs if j[0] in wanted]
    k, n = parse_shard(args.shard)
    jobs = jobs[k - 1::n]
    part = os.path.join(args.parts, f"part-{k}-of-{n}.jsonl")
    done = {e["name"] for e in read_parts([part])}
    torch.set_num_threads(args.threads)
    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                "transformers": transformers.__version__, "peft": peft.__version__,
                "python": sys.version.split()[0]}
    with open(part, "a") as f:
        for name, job in jobs:
            if name in done:
                continue
            start = time.monotonic()
            entry = {**job(), **versions}
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            figure = entry.get("torch_peak", "refused: " + entry.get("refused", ""))
            print(f"{name:28s} {figure} ({time.monotonic() - start:.0f} s)", flush=True)
            gc.collect()


def read_parts(paths):
    entries = []
    for path in paths:
        if os.path.exists(path):
            with open(path) as f:
                entries += [json.loads(line) for line in f if line.strip()]
    return entries


def merge(directory, path):
    entries = read_parts(sorted(glob.glob(os.path.join(directory, "part-*.jsonl"))))
    if not entries:
        sys.exit(f"error: no part files in {directory}")
    versions = {(e["torch"], e["torchvision"]) for e in entries}
    if len(versions) != 1:
        sys.exit(f"error: the parts come from different releases: {sorted(versions)}")
    torch_version, torchvision_version = versions.pop()
    libraries = {(e["transformers"], e["peft"]) for e in entries if "transformers" in e}
    if len(libraries) > 1:
        sys.exit(f"error: the parts come from different releases: {sorted(libraries)}")
    transformers_version, peft_version = libraries.pop() if libraries else (None, None)
    shared = ("torch", "torchvision", "transformers", "peft", "name")
    models = {e["name"]: {k: v for k, v in e.items() if k not in shared} for e in entries}
    with lzma.open(path + ".part", "wt") as f:
        json.dump({"torch": torch_version, "torchvision": torchvision_version,
                   "transformers": transformers_version, "peft": peft_version,
                   "models": models}, f, sort_keys=True, indent=0)
    os.replace(path + ".part", path)
    print(f"wrote {os.path.relpath(path)}: {len(models)} models, torch {torch_version}, "
          f"torchvision {torchvision_version}")


def parse_shard(text):
    try:
        k, n = (int(v) for v in text.split("/"))
        if not 1 <= k <= n:
            raise ValueError
    except ValueError:
        sys.exit(f"error: --shard '{text}' is not K/N with 1 <= K <= N")
    return k, n


# ---- replay (Debian's PyTorch 1.13) ----------------------------------------------------------------------

def read_kept(path):
    """The kept models, or one line and exit 2 when the file is missing or not ours."""
    try:
        with lzma.open(path, "rt") as f:
            data = json.load(f)
        models = data["models"]
        if not isinstance(models, dict) or not models:
            raise ValueError("no models")
    except (OSError, ValueError, KeyError, TypeError, EOFError, lzma.LZMAError) as e:
        print(f"error: {os.path.relpath(path)} cannot be read ({e}); hint: record it under "
              "PyTorch 2.x (see this script's header)", file=sys.stderr)
        sys.exit(2)
    return data


def replay_model(tv, report, binary, directory, name, entry, counts):
    size = (f"{entry['shape'][0]:3d} tokens" if entry["kind"] == "language"
            else f"{entry['shape'][1]:3d}px")
    label = f"{name:28s} {entry['optimizer']:5s} {size} b{entry['batch']}"
    if "refused" in entry:
        # The tracer's refusal was seen when recording; trainfit is not given anything.
        counts["refused"].append(name)
        report.show(f"{label} refused by the tracer when recorded: {entry['refused']}")
        return
    tv.compare_trace(report, binary, directory, entry["trace"], entry["batch"], counts,
                     name=name, label=label, torch_peak=lambda: entry["torch_peak"],
                     note=f"{entry['parameters'] / 1e6:.1f} M parameters")


def replay(args):
    import check_torchvision as tv
    from harness import Report

    data = read_kept(args.kept)
    models = data["models"]
    names = sorted(models)
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            sys.exit(f"error: not kept in {os.path.relpath(args.kept)}: {', '.join(unknown)}")
        names = [n for n in names if n in wanted]
    k, n = parse_shard(args.shard)
    names = names[k - 1::n]
    decoders = (f" and transformers {data['transformers']} decoders"
                if data.get("transformers") else "")
    report = Report(f"torchvision {data['torchvision']} corpus{decoders} traced and measured under "
                    f"PyTorch {data['torch']} (CPU, kept in {os.path.relpath(args.kept)}), "
                    f"estimated by trainfit, within {TOLERANCE:.0%}")
    counts = {"matched": [], "failed": [], "refused": []}
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as directory:
        for name in names:
            replay_model(tv, report, args.trainfit, directory, name, models[name], counts)
    report.show(f"coverage: {len(counts['matched'])} of {len(names)} models match within "
                f"{TOLERANCE:.0%}; refused in one line: {', '.join(counts['refused']) or 'none'}; "
                f"{time.monotonic() - start:.0f} s")
    report.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", choices=("replay", "record"), default="replay")
    ap.add_argument("--trainfit", help="the trainfit binary (replay)")
    ap.add_argument("--kept", default=KEPT,
                    help="the kept file (replay reads it, --merge writes it; default %(default)s)")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--shard", default="1/1", metavar="K/N", help="the K-th of N equal parts")
    ap.add_argument("--parts", metavar="DIR", help="record: where each shard's part file goes")
    ap.add_argument("--merge", metavar="DIR", help="record: write the kept file from DIR's parts")
    ap.add_argument("--threads", type=int, default=1, help="record: PyTorch's threads")
    args = ap.parse_args()
    if args.mode == "record":
        if args.merge:
            merge(args.merge, args.kept)
        elif args.parts:
            record(args)
        else:
            ap.error("record needs --parts DIR (or --merge DIR)")
    else:
        if not args.trainfit:
            ap.error("replay needs --trainfit")
        replay(args)


if __name__ == "__main__":
    main()
