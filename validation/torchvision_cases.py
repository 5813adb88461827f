"""How validation/check_torchvision.py measures a torchvision model in real PyTorch: the losses
and batches of its training steps. PyTorch's figures kept in validation/measured/ are valid while
this file (with harness.py) is unchanged; which models, sizes and batches are measured is the
check's choice, and part of each figure's key."""
import torch
import torch.nn.functional as F

from harness import training_peak
from torch_models import Case

SEGMENT_CLASSES = 21  # torchvision's segmentation default (Pascal VOC)


def logits(output):
    """What the live default loss scores: the tensor, or a namedtuple's first field (Inception,
    GoogLeNet in training mode)."""
    return output if isinstance(output, torch.Tensor) else output[0]


def classifier_loss(output, target):
    """Cross-entropy on random classes, as trainfit's default loss for a live classifier."""
    return F.cross_entropy(logits(output), target)


def segment_loss(output, inputs):
    """Per-pixel cross-entropy on random classes, with the auxiliary head's at 0.5 when the
    model has one (torchvision's reference training); loss_fn(output, inputs) for trainfit."""
    target = torch.randint(0, SEGMENT_CLASSES, (inputs.shape[0], inputs.shape[2], inputs.shape[3]))
    loss = F.cross_entropy(output["out"], target)
    if "aux" in output:
        loss = loss + 0.5 * F.cross_entropy(output["aux"], target)
    return loss


def measure(model, kind, shape, batch, optimizer):
    """The peak of live tensor bytes over two training steps of `model` at `batch` on random
    images of `shape` (harness.training_peak)."""
    if kind == "segmentation":
        def make_batch():
            x = torch.randn(batch, *shape)
            return [x], [x]
        loss = segment_loss
    else:
        def make_batch():
            return [torch.randn(batch, *shape)], [torch.randint(0, 1000, (batch,))]
        loss = classifier_loss
    peak, _ = training_peak(Case(model, [], [], loss), optimizer, make_batch)
    return peak
