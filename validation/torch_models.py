"""The PyTorch models that trainfit's zoo reproduces, built on CPU for the checks.

    model, inputs, loss_fn = build("resnet50", batch=2, input=(3, 224, 224))
    loss = loss_fn(model(*inputs), targets)

torchvision models come from torchvision itself; GPT-2 comes from gpt2_reference.py, our own
re-creation of Hugging Face transformers' GPT2LMHeadModel forward (transformers is not a Debian
package here); LeRobot's ACT and Diffusion Policy from lerobot_reference.py, likewise ours.
"""
import torch
import torch.nn.functional as F
import torchvision

import gpt2_reference
import lerobot_reference

POLICIES = ["act", "diffusion"]
TORCHVISION = [
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn",
    "vit_b_16", "vit_b_32", "vit_l_16",
]


class Case:
    """A model with its batch and loss: call loss() to run forward and loss."""

    def __init__(self, model, inputs, targets, loss_fn, make_batch=None, preset_optimizer=None):
        self.model, self.inputs, self.targets, self.loss_fn = model, inputs, targets, loss_fn
        self.make_batch = make_batch  # a fresh (inputs, targets), for training_peak
        self.preset_optimizer = preset_optimizer  # the model's own training recipe, if any

    def loss(self):
        return self.loss_fn(self.model(*self.inputs), *self.targets)

    def batch_tensors(self):
        out = []
        for t in list(self.inputs) + list(self.targets):
            out += list(t.values()) if isinstance(t, dict) else [t]
        return out


def build(name, batch=1, image=(3, 224, 224), seq_len=None, sets=None):
    sets = dict(sets or {})
    torch.manual_seed(0)
    if name in TORCHVISION:
        kwargs = {}
        if "num_classes" in sets:
            kwargs["num_classes"] = int(sets.pop("num_classes"))
        if name.startswith("vit"):
            kwargs["image_size"] = image[1]
        model = getattr(torchvision.models, name)(**kwargs)
        assert not sets, f"unhandled keys {sets}"
        model.train()
        x = torch.randn(batch, *image)
        y = torch.randint(0, model_classes(model), (batch,))
        return Case(model, [x], [y], F.cross_entropy)
    if name in POLICIES:
        # A LeRobot policy takes the batch dict and returns its loss.
        policy, make_policy_batch = lerobot_reference.build(name, batch, sets)
        return Case(policy, [make_policy_batch()], [], lambda loss: loss,
                    make_batch=lambda: ([make_policy_batch()], []),
                    preset_optimizer=lambda: lerobot_reference.preset_optimizer(
                        name, policy.optimizer_groups()))
    if name.startswith("gpt2"):
        model = gpt2_reference.GPT2LMHeadModel(gpt2_reference.config(name, sets))
        model.train()
        seq_len = seq_len or 1024
        ids = torch.randint(0, model.config["vocab_size"], (batch, seq_len))
        labels = torch.randint(0, model.config["vocab_size"], (batch, seq_len))
        return Case(model, [ids], [labels], lambda logits, labels: gpt2_reference.causal_lm_loss(
            logits, labels, model.config["vocab_size"]))
    raise KeyError(name)


def model_classes(model):
    for attr in ("fc", "heads", "classifier"):
        m = getattr(model, attr, None)
        if m is not None:
            last = [x for x in m.modules() if isinstance(x, torch.nn.Linear)][-1]
            return last.out_features
    raise ValueError("no classifier found")
