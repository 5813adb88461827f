"""Synthetic Datasets that reproduce the data-loading situations trainfit plans for, without
downloads (python3 -m trainfit.loader --dataset loader_datasets:NAME):

    decode        JPEG images decoded, cropped and resized per sample: CPU-bound, like an
                  image pipeline (about a millisecond per sample on one core)
    labels        seed 002's mistake, scaled down: every sample's labels as Python lists of floats
                  in dicts, built in __init__ (a few hundred MB of Python objects, whose pages
                  every forked worker copies as it reads them)
    labels_numpy  the fix: the same labels in one NumPy array
    large         large samples (float32 frames), whose batches in flight fill /dev/shm
    raises        a Dataset whose __getitem__ raises at one index
    dies          a Dataset whose worker process dies (os._exit) on its first sample
    slow          a Dataset whose __getitem__ sleeps for a long time (or only in workers)
"""
import io
import os
import time

import numpy as np
import torch
from torch.utils.data import Dataset

# SMPL-like labels per sample: 72 pose + 10 shape + 24 x 3 joints + 24 x 2 keypoints.
LABEL_FIELDS = {"pose": 72, "betas": 10, "joints3d": 72, "joints2d": 48}
LABEL_WIDTH = sum(LABEL_FIELDS.values())


class Decode(Dataset):
    """`n` JPEG images of `size` x `size`, encoded once in __init__ into one byte buffer with
    offsets (flat, so workers share it); __getitem__ decodes one, crops it and resizes the crop
    to `out` x `out`, returned as uint8 (normalised on the GPU, as LeRobot's loaders do): about a
    millisecond of one core, with little memory churn."""

    def __init__(self, n=20000, size=448, out=160, distinct=64, seed=0):
        from PIL import Image
        rng = np.random.default_rng(seed)
        blobs = []
        for _ in range(distinct):
            base = rng.integers(0, 255, (size // 8, size // 8, 3), dtype=np.uint8)
            image = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))
            noise = rng.integers(0, 24, image.shape, dtype=np.uint8)
            buffer = io.BytesIO()
            Image.fromarray(image + noise).save(buffer, format="JPEG", quality=90)
            blobs.append(buffer.getvalue())
        self.offsets = np.cumsum([0] + [len(b) for b in blobs]).astype(np.int64)
        self.blob = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        self.n, self.size, self.out = n, size, out

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        from PIL import Image
        k = i % (len(self.offsets) - 1)
        data = self.blob[self.offsets[k]:self.offsets[k + 1]].tobytes()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        crop = self.size * 7 // 8
        x = (i * 7) % (self.size - crop)
        image = image.crop((x, x, x + crop, x + crop)).resize((self.out, self.out), Image.BILINEAR)
        return torch.from_numpy(np.asarray(image).transpose(2, 0, 1).copy()), i % 10


def _label_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, LABEL_WIDTH)).astype(np.float32)


class Labels(Dataset):
    """Per-sample labels as Python objects: a dict of lists of floats for each of `n` samples."""

    def __init__(self, n=60000, seed=0):
        rows = _label_rows(n, seed)
        self.labels = []
        for row in rows:
            values = row.tolist()
            label, start = {}, 0
            for name, width in LABEL_FIELDS.items():
                label[name] = values[start:start + width]
                start += width
            self.labels.append(label)
        del rows

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        label = self.labels[i]
        values = [v for name in LABEL_FIELDS for v in label[name]]
        return torch.tensor(values, dtype=torch.float32), torch.zeros(3, 32, 32)


class LabelsNumpy(Dataset):
    """The fix for Labels: the same values in one float32 array."""

    def __init__(self, n=60000, seed=0):
        self.labels = _label_rows(n, seed)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(self.labels[i].copy()), torch.zeros(3, 32, 32)


class Large(Dataset):
    """Samples of 3 x `height` x `width` float32 (with the defaults 3.7 MB each)."""

    def __init__(self, n=512, height=480, width=640):
        self.n, self.shape = n, (3, height, width)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full(self.shape, float(i % 7)), i


class Raises(Dataset):
    def __init__(self, n=256, at=5):
        self.n, self.at = n, at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at or i % 97 == 3:
            raise ValueError(f"corrupt sample {i}")
        return torch.zeros(4)


class Dies(Dataset):
    """Fine in the main process; a worker process exits on its first sample."""

    def __init__(self, n=256):
        self.n, self.main = n, os.getpid()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if os.getpid() != self.main:
            os._exit(3)
        return torch.zeros(4)


class Slow(Dataset):
    """`seconds` a sample; in a worker process `worker_seconds` if given."""

    def __init__(self, n=64, seconds=3600.0, worker_seconds=None):
        self.n, self.seconds, self.worker_seconds = n, seconds, worker_seconds
        self.main = os.getpid()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        in_worker = os.getpid() != self.main and self.worker_seconds is not None
        time.sleep(self.worker_seconds if in_worker else self.seconds)
        return torch.zeros(4)


def decode(**kwargs):
    return Decode(**kwargs)


def labels(**kwargs):
    return Labels(**kwargs)


def labels_numpy(**kwargs):
    return LabelsNumpy(**kwargs)


def large(**kwargs):
    return Large(**kwargs)


def raises(**kwargs):
    return Raises(**kwargs)


def dies(**kwargs):
    return Dies(**kwargs)


def slow(**kwargs):
    return Slow(**kwargs)
