"""The digits task's MNIST source (thesis Sec. 3.2.3, App. B.3.6: permuted MNIST), on small
synthetic files in MNIST's IDX format: reading, splits, pins, permutations, bad input, and
the transfer experiment's MNIST path end to end."""

import numpy as np
import pytest
import torch
import yaml

from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.experiments.base import run_experiment
from sglab.registry import experiment
from sglab.tasks import build_task
from sglab.tasks.digits import MNIST, MNIST_MEAN, MNIST_STD, pixel_permutation, read_idx

TRAIN, TEST = 300, 50


def write_idx(path, array: np.ndarray) -> None:
    """``array`` (uint8) as an IDX file: magic 0x0000080N, N big-endian sizes, the bytes."""
    head = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, dtype=">i4").tobytes()
    path.write_bytes(head + array.astype(np.uint8).tobytes())


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """A directory with MNIST's four file names holding 300 / 50 random 28x28 images; each
    label is written into the image's first pixel, so an image can be traced to its label."""
    directory = tmp_path_factory.mktemp("mnist")
    rng = np.random.default_rng(0)
    for split, n in (("train", TRAIN), ("t10k", TEST)):
        labels = np.arange(n) % 10
        rng.shuffle(labels)
        images = rng.integers(0, 256, (n, 28, 28))
        images[:, 0, 0] = labels
        write_idx(directory / f"{split}-images-idx3-ubyte", images)
        write_idx(directory / f"{split}-labels-idx1-ubyte", labels)
    return directory


def mnist(directory, **fields):
    task = {"name": "digits", "source": "mnist", "data_dir": str(directory),
            "verify_published": False, **fields}
    return build_task(build_run_config({"task": task, "model": {
        "name": "fnn", "hidden": [8], "outputs": 1, "classes": 10,
        "input_encoding": "value"}}).task)


def test_idx_files_read_back_exactly(tmp_path):
    array = np.random.default_rng(1).integers(0, 256, (4, 3, 2)).astype(np.uint8)
    write_idx(tmp_path / "x", array)
    assert np.array_equal(read_idx(tmp_path / "x", 3), array)
    with pytest.raises(SglabError, match="not an IDX file of unsigned bytes with 1"):
        read_idx(tmp_path / "x", 1)  # three dimensions, not one
    (tmp_path / "short").write_bytes((tmp_path / "x").read_bytes()[:-1])
    with pytest.raises(SglabError, match="not an IDX file"):
        read_idx(tmp_path / "short", 3)


def test_mnist_splits_validation_from_train_and_its_own_test_set(mnist_dir):
    task = mnist(mnist_dir, valid_fraction=0.2)
    train, valid, test = (task.split(s) for s in ("train", "iid_valid", "iid_test"))
    assert len(train["labels"]) == 240 and len(valid["labels"]) == 60
    assert len(test["labels"]) == TEST and len(task.vocab) == 256 and task.max_length == 784
    assert train["pixels"].dtype == torch.uint8 and train["pixels"].shape == (240, 784)
    for split in (train, valid, test):  # every image still carries its own label
        assert torch.equal(split["pixels"][:, 0].long(), split["labels"])
    # stratified: each class 6 times in the 60 validation images
    assert torch.equal(valid["labels"].bincount(minlength=10), torch.full((10,), 6))
    written = read_idx(mnist_dir / "t10k-images-idx3-ubyte", 3).reshape(TEST, -1)
    assert np.array_equal(test["pixels"].numpy(), written)  # the test file, in its order
    together = torch.cat([train["pixels"], valid["pixels"]])
    assert len({tuple(row.tolist()) for row in together}) == TRAIN  # disjoint, complete
    again, other = mnist(mnist_dir, valid_fraction=0.2), mnist(mnist_dir, valid_fraction=0.2,
                                                               data_seed=1)
    assert torch.equal(again.split("iid_valid")["pixels"], valid["pixels"])
    assert not torch.equal(other.split("iid_valid")["pixels"], valid["pixels"])
    batch = task.train_batch(16, torch.Generator().manual_seed(0))
    assert batch.input_ids.dtype == torch.int64 and batch.input_ids.shape == (16, 784)
    assert torch.equal(batch.input_ids[:, 0], batch.targets[:, 0])


def test_mnist_permutation_moves_every_split_alike(mnist_dir):
    plain, permuted = mnist(mnist_dir), mnist(mnist_dir, permutation=3)
    order = pixel_permutation(3, 28)
    for split in ("train", "iid_valid", "iid_test"):
        assert torch.equal(permuted.split(split)["pixels"], plain.split(split)["pixels"][:, order])
        assert torch.equal(permuted.split(split)["labels"], plain.split(split)["labels"])


def test_mnist_files_are_pinned_and_bad_input_is_a_sglab_error(mnist_dir, tmp_path):
    with pytest.raises(SglabError, match="is not the published file"):
        mnist(mnist_dir, verify_published=True)  # synthetic files are not MNIST's
    with pytest.raises(SglabError, match="lacks train-images-idx3-ubyte, .*t10k-labels-idx1-ubyte"):
        mnist(tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written where the files are missing
    for fields, message in [({"data_dir": None}, "source=mnist needs data_dir"),
                            ({"test_fraction": 0.2}, "test_fraction=0.2 has no effect without "
                                                     "source=sklearn"),
                            ({"side": 16}, "side=16 has no effect without source=sklearn")]:
        with pytest.raises(SglabError, match=message):
            build_run_config({"task": {"name": "digits", "source": "mnist", "data_dir": "d",
                                       **fields}})
    with pytest.raises(SglabError, match="data_dir=.* has no effect without source=mnist"):
        build_run_config({"task": {"name": "digits", "data_dir": str(mnist_dir)}})
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in MNIST.files:
        (broken / name).write_bytes((mnist_dir / name).read_bytes())
    labels = read_idx(mnist_dir / "train-labels-idx1-ubyte", 1)[:-1]
    write_idx(broken / "train-labels-idx1-ubyte", labels)  # one label short
    with pytest.raises(SglabError, match="are not MNIST's 28x28 images with one label"):
        mnist(broken)


def test_transfer_reads_permuted_mnist_at_paper_and_says_where_data_is_missing(tmp_path,
                                                                               capsys):
    transfer = experiment("masks-transfer")
    paper = transfer.arms(transfer.presets["paper"])[0].base
    assert paper["task"] == {"name": "digits", "source": "mnist", "data_dir": "data/mnist",
                             "valid_fraction": 0.2, "permutation": 1}
    assert (paper["model"]["input_mean"], paper["model"]["input_std"]) == (MNIST_MEAN, MNIST_STD)
    assert main(["run", "masks-transfer", "--preset", "quick", "--param", "dataset=mnist",
                 "--set", f"task.data_dir={tmp_path / 'no'}", "--out", str(tmp_path / "out"),
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    error = capsys.readouterr().err
    assert "lacks train-images-idx3-ubyte" in error and "task.data_dir=PATH" in error
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()
    with pytest.raises(SglabError, match="dataset = 'cifar'"):
        transfer.preset("quick", changes=["dataset=cifar", "standardize=true"])


def test_transfer_quick_preset_on_mnist_end_to_end(mnist_dir, tmp_path):
    results = run_experiment(experiment("masks-transfer"), "quick", tmp_path / "out",
                             tmp_path / "runs", workers=1, threads=1, printer=lambda *a: None,
                             params=["dataset=mnist", "standardize=true"],
                             overrides=[f"task.data_dir={mnist_dir}",
                                        "task.verify_published=false"])
    assert "MNIST" in results["sections"][0]["title"] and results["claims"]
    configs = [yaml.safe_load((run / "config.yaml").read_text())
               for run in (tmp_path / "runs").iterdir() if run.is_dir()]
    assert len(configs) == 1 + 3  # the unmasked net and three tasks of one chain
    assert all(c["task"]["source"] == "mnist" for c in configs)
    assert sorted(c["task"]["permutation"] for c in configs) == [1, 1, 2, 3]
    net = next(c for c in configs if c["model"]["name"] == "fnn")
    assert (net["model"]["input_mean"], net["model"]["input_std"]) == (MNIST_MEAN, MNIST_STD)
