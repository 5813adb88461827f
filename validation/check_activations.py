"""Bytes autograd keeps for backward: trainfit's cpu profile against real PyTorch on CPU.

For each model, batch size and input size, the forward pass and loss run under
saved_tensors_hooks (harness.saved_tensor_bytes) and the unique kept storages are summed;
`trainfit summary --device-profile cpu --json` must give the same total within 1%.

    /usr/bin/python3 validation/check_activations.py --trainfit build/release/trainfit
"""
import argparse
import gc

import torch

import torch_models
from harness import Report, run_trainfit, saved_tensor_bytes

TOLERANCE = 0.01

# (model, batch sizes, image sizes or sequence lengths, --set keys, --freeze prefixes)
CASES = [
    ("resnet18", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("resnet50", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("vgg16_bn", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("vit_b_16", (1, 3), ((3, 224, 224), (3, 160, 160)), {}, ()),
    ("vgg16", (2,), ((3, 224, 224),), {}, ()),
    ("gpt2", (2,), (64,), {"n_layer": "2", "attention": "eager"}, ()),
    ("resnet18", (2,), ((3, 224, 224),), {}, ("conv1", "bn1", "layer1")),
    ("vit_b_16", (2,), ((3, 160, 160),), {}, ("conv_proj", "encoder.layers.encoder_layer_0")),
]


def freeze(model, prefixes):
    for name, p in model.named_parameters():
        if any(name == q or name.startswith(q + ".") for q in prefixes):
            p.requires_grad_(False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    report = Report(f"kept for backward: trainfit --device-profile cpu vs PyTorch {torch.__version__} (CPU)")
    for name, batches, sizes, sets, frozen in CASES:
        for size in sizes:
            for batch in batches:
                sequence = isinstance(size, int)
                case = torch_models.build(name, batch=batch, image=None if sequence else size,
                                          seq_len=size if sequence else None, sets=sets)
                freeze(case.model, frozen)
                measured = saved_tensor_bytes(case.model, case.loss, exclude=case.batch_tensors())
                flags = ["--seq-len", str(size)] if sequence else ["--input", "x".join(map(str, size))]
                for k, v in sets.items():
                    flags += ["--set", f"{k}={v}"]
                for q in frozen:
                    flags += ["--freeze", q]
                ours = run_trainfit(args.trainfit, ["summary", "--model", name, "--batch", str(batch),
                                                    "--device-profile", "cpu", "--json", "--depth", "0"]
                                    + flags)["activation_bytes"]
                error = (ours - measured) / measured
                label = f"{name} batch {batch} {'seq ' + str(size) if sequence else 'x'.join(map(str, size))}"
                if frozen:
                    label += " frozen " + ",".join(frozen)
                report.check(abs(error) <= TOLERANCE,
                             f"{label:48s} torch {measured:>13,} trainfit {ours:>13,}  {error:+.4%}")
                del case
                gc.collect()
    report.finish()


if __name__ == "__main__":
    main()
