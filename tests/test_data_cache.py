"""The disk cache of generated task data (sglab.tasks.cache)."""

import numpy as np
import pytest
import torch

from sglab.config import TaskConfig, build_run_config
from sglab.tasks import build_task, cache
from sglab.train.loop import Trainer

TASKS = [
    ["task.name=ctl", "task.train_size=400"],
    ["task.name=ctlpp", "task.train_size=400"],
    ["task.name=ctlpp", "task.variant=S", "task.train_size=400"],
    ["task.name=listops", "task.train_size=300", "task.iid_valid_size=50",
     "task.ood_valid_size=50", "task.test_size=50", "task.train_depths=[1,2]",
     "task.ood_valid_depths=[3,3]", "task.test_depths=[4,4]", "task.max_tokens=24"],
    ["task.name=arithmetic", "task.train_size=300", "task.train_depths=[1,2]",
     "task.ood_valid_depths=[3,3]", "task.test_depths=[4,4]", "task.max_tokens=20"],
    ["task.name=addition", "task.train_size=300", "task.test_size=100"],
    ["task.name=addition", "task.train_size=300", "task.test_size=100",
     "task.loss_on=packed", "task.block_size=64"],
    ["task.name=anchors"],
]


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    """The cache in a temp dir, saving every build however fast."""
    directory = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(directory))
    monkeypatch.setattr(cache, "MIN_SECONDS", 0.0)
    return directory


def task_config(overrides) -> TaskConfig:
    model = "model.readout=first" if "task.name=addition" not in overrides[0] \
        and "anchors" not in overrides[0] else "model.readout=none"
    return build_run_config({}, [*overrides, model]).task


def assert_same(a, b, where="task"):
    """Deep equality of task state: tensors equal in dtype and values."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif hasattr(a, "__dict__"):
        assert type(a) is type(b), where
        assert_same(vars(a), vars(b), where)
    else:
        assert a == b, where


@pytest.mark.parametrize("overrides", TASKS, ids=lambda o: " ".join(o[:3]))
def test_a_cached_task_equals_the_built_one(cache_on, overrides):
    config = task_config(overrides)
    built = build_task(config)
    assert built.data_note.startswith("task data built")
    assert len(list(cache_on.glob("*.pt.gz"))) == 1
    loaded = build_task(config)
    assert loaded.data_note.startswith("task data loaded")
    state = {k: v for k, v in vars(built).items() if k != "data_note"}
    assert_same(state, {k: v for k, v in vars(loaded).items() if k != "data_note"})
    for task in (built, loaded):  # the same training batches from the same generator
        generator = torch.Generator().manual_seed(3)
        task.batches = [task.train_batch(8, generator) for _ in range(3)]
    assert_same(built.batches, loaded.batches, "batches")


def test_narrowing_keeps_values_and_int64(cache_on):
    values = {"small": torch.tensor([0, 5, -3]), "mid": torch.tensor([40_000, -2]),
              "big": torch.tensor([2**40, 1]), "empty": torch.zeros(0, dtype=torch.long),
              "float": torch.tensor([0.5])}
    narrowed = cache._narrow(values)
    assert narrowed["small"].tensor.dtype == torch.int8
    assert narrowed["mid"].tensor.dtype == torch.int32
    assert narrowed["big"].dtype == torch.int64
    assert_same(cache._widen(narrowed), values)


def test_another_config_or_generator_source_is_another_file(cache_on, monkeypatch):
    a = task_config(TASKS[0])
    b = task_config([*TASKS[0], "task.data_seed=1"])
    assert cache.cache_path(a, cache_on) != cache.cache_path(b, cache_on)
    before = cache.cache_path(a, cache_on)
    monkeypatch.setattr(cache, "source_fingerprint", lambda: "edited generator")
    assert cache.cache_path(a, cache_on) != before


def test_an_unreadable_file_is_rebuilt(cache_on):
    config = task_config(TASKS[0])
    built = build_task(config)
    path = cache.cache_path(config, cache_on)
    path.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="cannot read") as warned:
        again = build_task(config)
    assert len([w for w in warned if "cannot read" in str(w.message)]) == 1  # read once
    assert again.data_note.startswith("task data built")
    assert_same(built.splits, again.splits)
    assert build_task(config).data_note.startswith("task data loaded")


def test_off_and_fast_builds_write_nothing(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, "off")
    assert build_task(task_config(TASKS[0])).data_note is None
    monkeypatch.setenv(cache.ENV, str(directory))  # default threshold: a quick build is not kept
    assert build_task(task_config(TASKS[0])).data_note is None
    assert not directory.exists()


def test_an_unwritable_directory_warns_and_trains_on(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(cache.ENV, str(blocker / "cache"))
    monkeypatch.setattr(cache, "MIN_SECONDS", 0.0)
    with pytest.warns(UserWarning, match="cannot write"):
        task = build_task(task_config(TASKS[0]))
    assert task.data_note is None and len(task.splits["train"]) > 0


def test_a_run_logs_where_its_data_came_from(cache_on, tmp_path):
    config = build_run_config({}, [*TASKS[0], "model.readout=first", "model.d_model=16",
                                   "model.n_heads=2", "model.n_layers=2",
                                   "model.attention_mask=bidirectional", "train.steps=4",
                                   "train.batch_size=8", "train.eval_interval=4",
                                   "train.threads=1"])
    lines = []
    Trainer(config, tmp_path / "a", printer=lines.append).run()
    Trainer(config, tmp_path / "b", printer=lines.append).run()
    notes = [line for line in lines if "task data" in line]
    assert [note.split("] ")[1].split(" ")[2] for note in notes] == ["built", "loaded"]


def test_data_build_fills_the_cache_once_per_task_config(cache_on, capsys):
    from sglab import registry
    from sglab.cli import main
    from sglab.experiments.base import first_stage_configs

    configs = first_stage_configs(registry.experiment("ndr-arithmetic"), "quick")
    distinct = {config.task.model_dump_json() for config in configs}
    assert main(["data", "build", "ndr-arithmetic:quick"]) == 0
    assert len(list(cache_on.glob("arithmetic-*.pt.gz"))) == len(distinct) < len(configs)
    for config in configs:  # every run of the preset now loads its data
        assert build_task(config.task).data_note.startswith("task data loaded")
    assert main(["data", "cache"]) == 0
    assert f"{len(distinct)} file(s)" in capsys.readouterr().out
    assert main(["data", "cache", "--clear"]) == 0
    assert not list(cache_on.glob("*.pt.gz"))


def test_data_build_errors(tmp_path, monkeypatch, capsys):
    from sglab.cli import main

    monkeypatch.setenv(cache.ENV, "off")
    assert main(["data", "build", "ndr-arithmetic:quick"]) == 2
    assert "data cache is off" in capsys.readouterr().err
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    assert main(["data", "build", "ndr-arithmetic"]) == 2
    assert "EXPERIMENT:PRESET" in capsys.readouterr().err
    assert main(["data", "build", "ndr-arithmetic:nosuch"]) == 2
    assert not (tmp_path / "cache").exists()


def test_a_second_process_waits_for_a_running_build_and_loads_it(cache_on, monkeypatch):
    # Two builders of one config (two sweep workers starting on the same data): the second
    # finds no file, waits on the first's build lock, then loads what the first wrote. A
    # thread stands for the second process (the lock file is locked per open file).
    import threading

    config = task_config(TASKS[0])
    task_class = type(build_task(config))
    monkeypatch.setenv(cache.ENV, str(cache_on))
    for file in cache_on.glob("*.pt.gz"):
        file.unlink()
    builds, first_building, second_missed = [], threading.Event(), threading.Event()
    real_build, real_load = task_class.build, cache._load

    def build(self):
        builds.append(threading.current_thread().name)
        if len(builds) == 1:
            first_building.set()
            assert second_missed.wait(30), "the second builder never looked for the file"
        return real_build(self)

    def load(task, path):
        loaded = real_load(task, path)
        if loaded is None and first_building.is_set():
            second_missed.set()
        return loaded

    monkeypatch.setattr(task_class, "build", build)
    monkeypatch.setattr(cache, "_load", load)
    results = {}
    first = threading.Thread(target=lambda: results.update(first=build_task(config)), name="first")
    first.start()
    assert first_building.wait(30)
    second = threading.Thread(target=lambda: results.update(second=build_task(config)),
                              name="second")
    second.start()
    first.join(60)
    second.join(60)
    assert builds == ["first"]
    assert results["first"].data_note.startswith("task data built")
    assert results["second"].data_note.startswith("task data loaded")
    assert "waiting for another process's build" in results["second"].data_note
    assert_same(results["first"].splits, results["second"].splits)


class _Planted:
    """Unpickled without weights_only, it creates the file ``marker`` (it runs code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def _plant(path, marker, config):
    import gzip
    import io

    buffer = io.BytesIO()
    torch.save({"format": cache.FORMAT, "config": config.model_dump_json(),
                "state": _Planted(marker), "tensors": []}, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(buffer.getvalue()))


def test_a_planted_pickle_in_the_cache_runs_no_code_and_is_rebuilt(cache_on, tmp_path):
    import gzip
    import io

    config = task_config(TASKS[0])
    path = cache.cache_path(config, cache_on)
    live = tmp_path / "live"  # the planted file does run code when unpickled as before
    _plant(path, live, config)
    torch.load(io.BytesIO(gzip.decompress(path.read_bytes())), weights_only=False)
    assert live.exists()
    marker = tmp_path / "pwned"
    _plant(path, marker, config)
    with pytest.warns(UserWarning, match="cannot read"):
        task = build_task(config)
    assert not marker.exists()
    assert task.data_note.startswith("task data built")  # rebuilt and replaced
    assert build_task(config).data_note.startswith("task data loaded")
    assert not marker.exists()


def test_a_planted_pickle_runs_no_code_during_sglab_train(cache_on, tmp_path, capsys):
    from sglab.cli import main
    from tests.conftest import tiny_config

    config = tiny_config("train.steps=2", "train.eval_interval=2")
    marker = tmp_path / "pwned"
    _plant(cache.cache_path(config.task, cache_on), marker, config.task)
    argv = ["train", "--runs-dir", str(tmp_path / "runs"), "--config", str(tmp_path / "c.yaml")]
    (tmp_path / "c.yaml").write_text(__import__("yaml").safe_dump(config.to_dict()))
    with pytest.warns(UserWarning, match="cannot read"):
        assert main(argv) == 0
    assert not marker.exists()


def test_a_cache_file_is_data_only(cache_on):
    # every task kind of TASKS round-trips (test_a_cached_task_equals_the_built_one); the
    # file itself loads with weights_only=True, holding only tensors and plain containers
    import gzip
    import io

    config = task_config(TASKS[1])
    build_task(config)
    stored = torch.load(io.BytesIO(gzip.decompress(cache.cache_path(config, cache_on).read_bytes())),
                        weights_only=True)
    assert set(stored) == {"format", "config", "state", "tensors"}
    assert isinstance(stored["state"], str)
    assert all(isinstance(t, torch.Tensor) for t in stored["tensors"])


def test_a_cache_file_naming_a_class_outside_sglab_is_rebuilt(cache_on):
    import gzip
    import io
    import json

    config = task_config(TASKS[0])
    build_task(config)
    path = cache.cache_path(config, cache_on)
    stored = torch.load(io.BytesIO(gzip.decompress(path.read_bytes())), weights_only=True)
    state = json.loads(stored["state"])
    state["v"][0][1] = {"$": "object", "class": "subprocess:Popen", "v": {}}
    stored["state"] = json.dumps(state)
    buffer = io.BytesIO()
    torch.save(stored, buffer)
    path.write_bytes(gzip.compress(buffer.getvalue()))
    with pytest.warns(UserWarning, match="not one of sglab's"):
        assert build_task(config).data_note.startswith("task data built")
