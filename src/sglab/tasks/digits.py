"""Handwritten digit classification on scikit-learn's bundled 8x8 digits (thesis Sec. 3.4,
App. B.3.8: the class-removal experiment; the thesis uses CIFAR-10, these digits stand in).

The 1797 images (10 classes, pixel values 0..16) ship inside scikit-learn, so nothing is
downloaded. Each image is one row of 64 integer ids in ``Batch.input_ids``: the id is the
pixel value (background 0 is the padding id, a zeroed input), the vocabulary has 17 ids,
and the model turns them into floats. Targets are [batch, 1] class ids; a model returns
logits [batch, 1, classes]. ``train`` / ``iid_valid`` / ``iid_test`` are a fixed
stratified split drawn from ``data_seed``.

``remove_class`` drops that class from the training batches only (a mask trained on "all
classes but c"); the evaluation splits keep every class and log the accuracy
(``exact_match``), the mean per-class true-positive rate (``tpr``, balanced accuracy) and
each class's rate (``tpr/class=3``). ``permutation`` (a seed) applies one fixed pixel
permutation to every image (permuted digits, for transfer between permutations). ``side``
resizes the images (bilinear, rounded to the pixel levels) before that: 28 gives the
784 inputs of MNIST.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.base import Batch, SplitsTask, Vocabulary

CLASSES = 10
PIXEL_LEVELS = 17  # pixel values 0..16
SIDE = 8


class DigitsConfig(TaskConfig):
    name: Literal["digits"] = "digits"
    valid_fraction: float = Field(0.15, gt=0, lt=1, description="Share of images in iid_valid.")
    test_fraction: float = Field(0.15, gt=0, lt=1, description="Share of images in iid_test.")
    remove_class: int | None = Field(None, description="Class (0-9) left out of the training "
                                                       "batches (null: train on all classes).")
    permutation: int | None = Field(None, description="Seed of a fixed pixel permutation "
                                                      "applied to every image (null: none).")
    side: int = Field(SIDE, ge=SIDE, le=64, description="Images resized to side x side "
                                                       "(bilinear, rounded to the 17 pixel "
                                                       "levels): 28 gives MNIST's 784 inputs.")

    split_metrics = ("exact_match", "loss", "tpr")

    @model_validator(mode="after")
    def _check(self):
        if self.remove_class is not None and not 0 <= self.remove_class < CLASSES:
            raise ValueError(f"remove_class={self.remove_class} is not a class: choose one of "
                             f"0-{CLASSES - 1} or null")
        if self.valid_fraction + self.test_fraction >= 0.9:
            raise ValueError(f"valid_fraction + test_fraction = "
                             f"{self.valid_fraction + self.test_fraction:g} leaves too little "
                             "to train on; keep their sum below 0.9")
        return self

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"]


def load_images() -> tuple[np.ndarray, np.ndarray]:
    """(pixels [1797, 64] int64 in 0..16, labels [1797]) from scikit-learn's bundled copy."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data.astype(np.int64), data.target.astype(np.int64)


def split_indices(labels: np.ndarray, valid_fraction: float, test_fraction: float,
                  seed: int) -> dict[str, np.ndarray]:
    """Stratified train / iid_valid / iid_test indices (each sorted), fixed by ``seed``."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    rest, test = train_test_split(index, test_size=test_fraction, stratify=labels,
                                  random_state=seed)
    train, valid = train_test_split(rest, test_size=valid_fraction / (1 - test_fraction),
                                    stratify=labels[rest], random_state=seed)
    return {"train": np.sort(train), "iid_valid": np.sort(valid), "iid_test": np.sort(test)}


def pixel_permutation(seed: int, side: int = SIDE) -> torch.Tensor:
    """A fixed permutation of the side x side pixel positions."""
    return torch.randperm(side * side, generator=torch.Generator().manual_seed(seed))


def resized(pixels: torch.Tensor, side: int) -> torch.Tensor:
    """[n, 64] pixel ids -> [n, side * side]: bilinear resizing, rounded to the levels."""
    if side == SIDE:
        return pixels
    images = pixels.view(-1, 1, SIDE, SIDE).double()
    bigger = F.interpolate(images, size=(side, side), mode="bilinear", align_corners=False)
    return bigger.round().clamp(0, PIXEL_LEVELS - 1).long().flatten(1)


def true_positive_rates(predictions: torch.Tensor, labels: torch.Tensor,
                        classes: int = CLASSES) -> torch.Tensor:
    """Per class: the share of its examples predicted as it (nan for a class with none)."""
    rates = torch.full((classes,), float("nan"))
    for c in range(classes):
        chosen = labels == c
        if bool(chosen.any()):
            rates[c] = (predictions[chosen] == c).float().mean()
    return rates


class DigitsTask(SplitsTask):
    """Splits are dicts ``{"pixels": [n, 64] ids, "labels": [n]}``."""

    eval_splits = ["iid_valid", "iid_test"]

    def __init__(self, config: DigitsConfig):
        self.config = config
        self.vocab = Vocabulary([Vocabulary.PAD, *(str(v) for v in range(1, PIXEL_LEVELS))])
        pixels, labels = load_images()
        pixels = resized(torch.from_numpy(pixels), config.side)
        labels = torch.from_numpy(labels)
        if config.permutation is not None:
            pixels = pixels[:, pixel_permutation(config.permutation, config.side)]
        index = split_indices(labels.numpy(), config.valid_fraction, config.test_fraction,
                              config.data_seed)
        self.splits = {name: {"pixels": pixels[torch.from_numpy(i)],
                              "labels": labels[torch.from_numpy(i)]}
                       for name, i in index.items()}
        train = self.splits["train"]
        self.train_rows = torch.arange(len(train["labels"]))
        if config.remove_class is not None:  # the removed class never reaches training
            self.train_rows = self.train_rows[train["labels"] != config.remove_class]

    @property
    def max_length(self) -> int:
        return self.config.side ** 2

    def check_model(self, model_config) -> None:
        classes = getattr(model_config, "classes", None)
        if classes is not None and classes != CLASSES:
            raise SglabError(f"task digits has {CLASSES} classes: set model.classes={CLASSES}")
        outputs = getattr(model_config, "outputs", None)
        if outputs is not None and outputs != 1:
            raise SglabError("task digits has one answer slot (the class): set model.outputs=1")

    def train_batch(self, batch_size: int, generator: torch.Generator, causal: bool) -> Batch:
        train = self.splits["train"]
        rows = self.train_rows[torch.randint(len(self.train_rows), (batch_size,),
                                             generator=generator)]
        return Batch(train["pixels"][rows], train["labels"][rows, None])

    @torch.no_grad()
    def logits(self, model, split: str, batch_size: int = 1024,
               max_examples: int | None = None, device="cpu") -> torch.Tensor:
        """Class logits [n, classes] on the first examples of a split."""
        pixels = self.split(split)["pixels"]
        n = len(pixels) if max_examples is None else min(len(pixels), max_examples)
        out = [model(pixels[s:min(s + batch_size, n)].to(device))[:, 0, :CLASSES].float().cpu()
               for s in range(0, n, batch_size)]
        return torch.cat(out)

    def predict(self, model, split: str, batch_size: int = 1024) -> torch.Tensor:
        """Predicted classes [n] on a split."""
        return self.logits(model, split, batch_size).argmax(-1)

    def evaluate(self, model, split: str, batch_size: int, max_examples: int | None = None,
                 device="cpu") -> dict[str, float]:
        logits = self.logits(model, split, batch_size, max_examples, device)
        labels = self.split(split)["labels"][: len(logits)]
        predictions = logits.argmax(-1)
        rates = true_positive_rates(predictions, labels)
        present = ~rates.isnan()
        metrics = {f"{split}/exact_match": float((predictions == labels).float().mean()),
                   f"{split}/loss": float(F.cross_entropy(logits, labels)),
                   f"{split}/tpr": float(rates[present].mean())}
        metrics.update({f"{split}/tpr/class={c}": float(rates[c])
                        for c in range(CLASSES) if bool(present[c])})
        return metrics


@registry.register("task", "digits", DigitsConfig,
                   "8x8 handwritten digits (scikit-learn), 10 classes (thesis Sec. 3.4 stand-in)")
def make_digits(config: DigitsConfig) -> DigitsTask:
    return DigitsTask(config)
