"""Handwritten digit classification (thesis Sec. 3.2.3 and 3.4, App. B.3.6 and B.3.8: the
transfer and class-removal experiments): scikit-learn's bundled 8x8 digits, or MNIST read
from a local directory.

``source: sklearn`` (default): the 1797 images (10 classes, pixel values 0..16) ship inside
scikit-learn, so nothing is downloaded; ``train`` / ``iid_valid`` / ``iid_test`` are a fixed
stratified split drawn from ``data_seed``. ``source: mnist``: the 70,000 28x28 images
(pixel values 0..255) of MNIST's four unpacked IDX files in ``data_dir``, each file pinned
by its SHA-256 (:mod:`sglab.tasks.published`); ``iid_test`` is MNIST's own 10,000-image test
set and ``iid_valid`` a stratified ``valid_fraction`` of its 60,000 training images (the
thesis's permuted MNIST trains on 48k: 0.2).

Each image is one row of integer ids in ``Batch.input_ids``: the id is the pixel value
(background 0 is the padding id, a zeroed input), the vocabulary has one id per pixel level
(17 or 256), and the model turns them into floats. Splits store the ids as uint8; batches
are int64. Targets are [batch, 1] class ids; a model returns logits [batch, 1, classes].

``remove_class`` drops that class from the training batches only (a mask trained on "all
classes but c"); the evaluation splits keep every class and log the accuracy
(``exact_match``), the mean per-class true-positive rate (``tpr``, balanced accuracy) and
each class's rate (``tpr/class=3``). ``permutation`` (a seed) applies one fixed pixel
permutation to every image (permuted digits, for transfer between permutations). ``side``
resizes the 8x8 digits (bilinear, rounded to the pixel levels) before that: 28 gives the
784 inputs of MNIST.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig, check_switches
from sglab.errors import SglabError
from sglab.tasks.base import Batch, SplitsTask, Vocabulary, scored_batches
from sglab.tasks.published import Source, fetch, missing_files

CLASSES = 10
PIXEL_LEVELS = 17  # pixel values 0..16
SIDE = 8
MNIST_SIDE, MNIST_LEVELS = 28, 256
# MNIST's training images, pixel / 255 (measured on the 60,000): what the thesis code's
# standardization subtracts and divides by
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "iid_test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
MNIST = Source(
    tuple(name for pair in MNIST_FILES.values() for name in pair), None,
    "the MNIST database (LeCun, Cortes and Burges; yann.lecun.com/exdb/mnist or a mirror), "
    "its four .gz files unpacked with gunzip",
    sha256={"train-images-idx3-ubyte":
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
            "train-labels-idx1-ubyte":
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
            "t10k-images-idx3-ubyte":
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
            "t10k-labels-idx1-ubyte":
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"})


class DigitsConfig(TaskConfig):
    name: Literal["digits"] = "digits"
    source: Literal["sklearn", "mnist"] = Field(
        "sklearn", description="sklearn: the bundled 8x8 digits; mnist: MNIST's IDX files in "
                               "data_dir.")
    data_dir: str | None = Field(None, description="source=mnist: the directory holding "
                                                   "MNIST's four unpacked IDX files.")
    verify_published: bool = Field(
        True, description="source=mnist: check each file against the published SHA-256 (false: "
                          "use a modified copy on purpose).")
    valid_fraction: float = Field(0.15, gt=0, lt=1, description="Share of images in iid_valid "
                                                                "(mnist: of its training set).")
    test_fraction: float = Field(0.15, gt=0, lt=1, description="Share of images in iid_test "
                                                               "(sklearn only).")
    remove_class: int | None = Field(None, description="Class (0-9) left out of the training "
                                                       "batches (null: train on all classes).")
    permutation: int | None = Field(None, description="Seed of a fixed pixel permutation "
                                                      "applied to every image (null: none).")
    side: int = Field(SIDE, ge=SIDE, le=64, description="sklearn: images resized to side x "
                                                       "side (bilinear, rounded to the 17 pixel "
                                                       "levels): 28 gives MNIST's 784 inputs.")

    split_metrics = ("exact_match", "loss", "tpr")

    @model_validator(mode="after")
    def _check(self):
        if self.remove_class is not None and not 0 <= self.remove_class < CLASSES:
            raise ValueError(f"remove_class={self.remove_class} is not a class: choose one of "
                             f"0-{CLASSES - 1} or null")
        # MNIST brings its own test set and size
        sklearn = (self.source == "sklearn", "source=sklearn")
        mnist = (self.source == "mnist", "source=mnist")
        check_switches(self, {"data_dir": mnist, "verify_published": mnist,
                              "test_fraction": sklearn, "side": sklearn})
        if self.source == "mnist" and self.data_dir is None:
            raise ValueError("source=mnist needs data_dir: the directory holding "
                             f"{', '.join(MNIST.files)} (set task.data_dir=PATH)")
        if self.source == "sklearn" and self.valid_fraction + self.test_fraction >= 0.9:
            raise ValueError(f"valid_fraction + test_fraction = "
                             f"{self.valid_fraction + self.test_fraction:g} leaves too little "
                             "to train on; keep their sum below 0.9")
        return self

    @property
    def image_side(self) -> int:
        return MNIST_SIDE if self.source == "mnist" else self.side

    @property
    def pixel_levels(self) -> int:
        return MNIST_LEVELS if self.source == "mnist" else PIXEL_LEVELS

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"]


def load_images() -> tuple[np.ndarray, np.ndarray]:
    """(pixels [1797, 64] int64 in 0..16, labels [1797]) from scikit-learn's bundled copy."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data.astype(np.int64), data.target.astype(np.int64)


def require_mnist(data_dir: str | Path) -> None:
    """An error naming the missing MNIST files and where to get them, before anything runs."""
    missing = missing_files(data_dir, MNIST.files)
    if missing:
        raise SglabError(f"task.data_dir {str(data_dir)!r} lacks {', '.join(missing)}: put "
                         f"{MNIST.where} there, or point task.data_dir at the directory that "
                         "holds them (--set task.data_dir=PATH)")


def read_idx(path: Path, dims: int) -> np.ndarray:
    """An IDX file of unsigned bytes (MNIST's format: the big-endian magic ``0x0000080N``
    for N dimensions, N big-endian int32 sizes, then the bytes) as an array of that shape."""
    data = path.read_bytes()
    head = 4 * (1 + dims)
    shape = tuple(int(n) for n in np.frombuffer(data[4:head], dtype=">i4")) \
        if len(data) >= head else ()
    if len(data) < head or data[:4] != bytes([0, 0, 8, dims]) or \
            len(data) != head + int(np.prod(shape)):
        raise SglabError(f"{path} is not an IDX file of unsigned bytes with {dims} "
                         f"dimension(s); fetch it again from {MNIST.where}")
    return np.frombuffer(data, dtype=np.uint8, offset=head).reshape(shape)


def load_mnist(data_dir: str | Path, verify_published: bool = True
               ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (pixels [60000, 784] uint8, labels [60000] int64), "iid_test": (the 10,000
    test images and labels)}; each file must be the published one unless
    ``verify_published`` is false."""
    require_mnist(data_dir)
    directory = fetch(data_dir, MNIST, printer=lambda _: None,
                      verify_published=verify_published)
    out = {}
    for split, (images, labels) in MNIST_FILES.items():
        pixels, classes = read_idx(directory / images, 3), read_idx(directory / labels, 1)
        if pixels.shape[1:] != (MNIST_SIDE, MNIST_SIDE) or len(pixels) != len(classes) or \
                int(classes.max(initial=0)) >= CLASSES:
            raise SglabError(f"{directory / images} and {directory / labels} are not MNIST's "
                             f"{MNIST_SIDE}x{MNIST_SIDE} images with one label in 0-9 each "
                             f"(images {pixels.shape}, labels {classes.shape})")
        out[split] = (pixels.reshape(len(pixels), -1), classes.astype(np.int64))
    return out


def split_indices(labels: np.ndarray, valid_fraction: float, test_fraction: float | None,
                  seed: int) -> dict[str, np.ndarray]:
    """Stratified train / iid_valid / iid_test indices (each sorted), fixed by ``seed``;
    ``test_fraction`` None: train / iid_valid only."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    out = {}
    rest = index
    if test_fraction is not None:
        rest, test = train_test_split(index, test_size=test_fraction, stratify=labels,
                                      random_state=seed)
        out["iid_test"] = np.sort(test)
        valid_fraction = valid_fraction / (1 - test_fraction)
    train, valid = train_test_split(rest, test_size=valid_fraction, stratify=labels[rest],
                                    random_state=seed)
    return {"train": np.sort(train), "iid_valid": np.sort(valid), **out}


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
    """Splits are dicts ``{"pixels": [n, side * side] uint8 ids, "labels": [n]}``."""

    eval_splits = ["iid_valid", "iid_test"]

    def __init__(self, config: DigitsConfig):
        self.config = config
        self.vocab = Vocabulary([Vocabulary.PAD,
                                 *(str(v) for v in range(1, config.pixel_levels))])
        if config.source == "mnist":
            data = load_mnist(config.data_dir, config.verify_published)
            train_pixels, train_labels = data["train"]
            index = split_indices(train_labels, config.valid_fraction, None, config.data_seed)
            parts = {name: (train_pixels[i], train_labels[i]) for name, i in index.items()}
            parts["iid_test"] = data["iid_test"]
        else:
            pixels, labels = load_images()
            index = split_indices(labels, config.valid_fraction, config.test_fraction,
                                  config.data_seed)
            pixels = resized(torch.from_numpy(pixels), config.side).numpy()
            parts = {name: (pixels[i], labels[i]) for name, i in index.items()}
        order = (pixel_permutation(config.permutation, config.image_side)
                 if config.permutation is not None else None)
        self.splits = {}
        for name in ("train", "iid_valid", "iid_test"):
            pixels, labels = parts[name]
            pixels = torch.from_numpy(np.array(pixels, dtype=np.uint8))  # a writable copy
            self.splits[name] = {"pixels": pixels if order is None else pixels[:, order],
                                 "labels": torch.from_numpy(np.array(labels, dtype=np.int64))}
        train = self.splits["train"]
        self.train_rows = torch.arange(len(train["labels"]))
        if config.remove_class is not None:  # the removed class never reaches training
            self.train_rows = self.train_rows[train["labels"] != config.remove_class]

    @property
    def max_length(self) -> int:
        return self.config.image_side ** 2

    def check_model(self, model_config) -> None:
        classes = getattr(model_config, "classes", None)
        if classes is not None and classes != CLASSES:
            raise SglabError(f"task digits has {CLASSES} classes: set model.classes={CLASSES}")
        outputs = getattr(model_config, "outputs", None)
        if outputs is not None and outputs != 1:
            raise SglabError("task digits has one answer slot (the class): set model.outputs=1")

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        train = self.splits["train"]
        rows = self.train_rows[torch.randint(len(self.train_rows), (batch_size,),
                                             generator=generator)]
        return Batch(train["pixels"][rows].long(), train["labels"][rows, None])

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The first ``max_examples`` images of a split (all: None) with their labels."""
        data = self.split(split)
        for rows in scored_batches(len(data["labels"]), batch_size, max_examples, spread=False):
            yield Batch(data["pixels"][rows].long(), data["labels"][rows, None])

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """The class logits [n, classes] of the batch's images, and their labels."""
        return {"logits": logits[:, 0, :CLASSES], "labels": batch.targets[:, 0]}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """Accuracy, loss, and the true-positive rate per class and on average."""
        logits, labels = totals["logits"], totals["labels"]
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
                   "handwritten digits, 10 classes: scikit-learn's 8x8 or MNIST from local files "
                   "(thesis Secs. 3.2.3, 3.4)")
def make_digits(config: DigitsConfig) -> DigitsTask:
    return DigitsTask(config)
