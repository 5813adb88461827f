"""LeRobot's ACT and Diffusion Policy as earlier releases train them (`--set version=`), built on
the re-creations in lerobot_reference.py, which follow 0.6.

- 0.3: the training loop (scripts/train.py) moves the raw batch to the device and holds it for
  the whole step; the policy's forward normalises a copy (policies/normalize.py: Normalize, its
  statistics frozen nn.Parameters in a ParameterDict per feature, under no_grad), the state and
  cameras first (normalize_inputs), then the action (normalize_targets). The policy also holds
  unnormalize_outputs' statistics, which training does not use.
- 0.4 and 0.5: a preprocessor normalises before the step, as in 0.6.
- Up to 0.5, ACT averages its masked L1 over every element; 0.6 over the unpadded ones.

The harness's loop holds the batch it makes for the whole step, as 0.3's loop does.

Kept figures of these cases carry DIGEST in their key: this file is not among the sources whose
digest discards every kept figure (harness.MEASURED_SOURCES).
"""
import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import lerobot_reference as ref
from torch_models import Case

with open(__file__, "rb") as _f:
    DIGEST = hashlib.sha256(_f.read()).hexdigest()[:16]


class Normalize(nn.Module):
    """LeRobot 0.3's Normalize: forward, under no_grad, returns a shallow copy of the batch with
    each feature replaced by (x - mean) / (std + 1e-8), or for min_max features by
    (x - min) / (max - min + 1e-8) * 2 - 1. `features`: (key, statistics shape, min_max)."""

    def __init__(self, features):
        super().__init__()
        self.features = features
        for key, shape, min_max in features:
            names = ("min", "max") if min_max else ("mean", "std")
            setattr(self, "buffer_" + key.replace(".", "_"), nn.ParameterDict(
                {n: nn.Parameter(torch.rand(shape) + 0.5, requires_grad=False) for n in names}))

    @torch.no_grad()
    def forward(self, batch):
        batch = dict(batch)
        for key, _, min_max in self.features:
            buffer = getattr(self, "buffer_" + key.replace(".", "_"))
            if min_max:
                batch[key] = (batch[key] - buffer["min"]) / (buffer["max"] - buffer["min"] + 1e-8)
                batch[key] = batch[key] * 2 - 1
            else:
                batch[key] = (batch[key] - buffer["mean"]) / (buffer["std"] + 1e-8)
        return batch


class Versioned:
    """What LeRobot 0.3 adds to a policy: normalize_inputs (the state, then each camera; the
    environment state has no statistics), normalize_targets and unnormalize_outputs (the
    action), each a Normalize; min_max: the state and action go to [-1, 1] (Diffusion)."""

    def add_normalizers(self, c, min_max):
        if c["version"] != "0.3":
            return
        cameras = len(ref.parse_cameras(c["cameras"]))
        inputs = [("observation.state", (c["state_dim"],), min_max)] if c["state_dim"] else []
        inputs += [(f"observation.images.cam{i}", (3, 1, 1), False) for i in range(cameras)]
        targets = [("action", (c["action_dim"],), min_max)]
        self.normalize_inputs = Normalize(inputs)
        self.normalize_targets = Normalize(targets)
        self.unnormalize_outputs = Normalize(targets)

    def inputs(self, batch):
        """The batch after normalize_inputs in 0.3; as it is after the preprocessor otherwise."""
        return self.normalize_inputs(batch) if self.c["version"] == "0.3" else dict(batch)

    def targets(self, batch):
        return self.normalize_targets(batch) if self.c["version"] == "0.3" else batch


class ActPolicy(Versioned, ref.ActPolicy):
    """ACTPolicy.forward of LeRobot 0.3 to 0.5."""

    def __init__(self, c):
        super().__init__(c)
        self.add_normalizers(c, False)

    def forward(self, batch):
        batch = self.inputs(batch)
        batch["observation.images"] = [batch[k] for k in sorted(batch)
                                       if k.startswith("observation.images.")]
        batch = self.targets(batch)
        predicted, (mu, log_sigma_x2) = self.model(batch)
        # The masked tensor averaged over every element.
        loss = (F.l1_loss(batch["action"], predicted, reduction="none")
                * ~batch["action_is_pad"].unsqueeze(-1)).mean()
        if self.c["use_vae"]:
            kld = (-0.5 * (1 + log_sigma_x2 - mu.pow(2) - log_sigma_x2.exp())).sum(-1).mean()
            loss = loss + kld * self.c["kl_weight"]
        return loss


class DiffusionPolicy(Versioned, ref.DiffusionPolicy):
    """DiffusionPolicy.forward of LeRobot 0.3: the state and action normalised to [-1, 1], the
    images by mean and std, before the cameras are stacked."""

    def __init__(self, c):
        super().__init__(c)
        self.add_normalizers(c, True)

    def forward(self, batch):
        batch = self.inputs(batch)
        keys = sorted(k for k in batch if k.startswith("observation.images."))
        if keys:
            batch["observation.images"] = torch.stack([batch[k] for k in keys], dim=-4)
        return self.diffusion.compute_loss(self.targets(batch))


def build_case(name, batch, sets):
    """torch_models.build's Case for a policy whose --set keys name an earlier version."""
    torch.manual_seed(0)
    if name == "act":
        c = ref.typed(ref.ACT_DEFAULTS, sets)
        policy = ActPolicy(c)
        make_policy_batch = lambda: ref.act_batch(c, batch)  # noqa: E731
    else:
        c = ref.diffusion_config(sets)
        policy = DiffusionPolicy(c)
        make_policy_batch = lambda: ref.diffusion_batch(c, batch)  # noqa: E731
    policy.train()
    return Case(policy, [make_policy_batch()], [], lambda loss: loss,
                make_batch=lambda: ([make_policy_batch()], []),
                preset_optimizer=lambda: ref.preset_optimizer(name, policy.optimizer_groups()))


def build(name, batch, sets):
    """A Case for `name` at `sets`: an earlier version's here, else torch_models'."""
    import torch_models
    if sets.get("version", "0.6") != "0.6":
        return build_case(name, batch, sets)
    return torch_models.build(name, batch=batch, sets=sets)


def key(name, batch, sets):
    """The kept-figure key of a case: with DIGEST where this file builds it."""
    k = [name, batch, sets]
    return k + [DIGEST] if sets.get("version", "0.6") != "0.6" else k
