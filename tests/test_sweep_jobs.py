import json

from sglab.sweep import SweepSpec, expand, run_configs
from sglab.sweep.jobs import executions, plan_jobs, sweep_run_ids
from sglab.sweep.local import plan_placement
from tests.test_store_and_sweep import TINY


def grid(seeds=3, **extra_grid):
    spec = SweepSpec(base=TINY, grid={"model.pos_encoding": ["learned", "none"], **extra_grid},
                     seeds=seeds)
    return expand(spec)


def test_plan_groups_seeds_of_a_cell_and_splits_for_workers(tmp_path):
    configs = grid(seeds=3)  # 2 cells x 3 seeds
    jobs = plan_jobs(configs, tmp_path, min_jobs=2)
    assert sorted(len(j) for j in jobs) == [3, 3]
    for job in jobs:  # one cell per job
        assert len({configs[i].model.positions.kind for i in job}) == 1
    assert sorted(i for j in jobs for i in j) == list(range(6))
    assert sorted(len(j) for j in plan_jobs(configs, tmp_path, min_jobs=4)) == [1, 1, 2, 2]
    assert all(len(j) == 1 for j in plan_jobs(configs, tmp_path, ensemble=False))
    # 20 compatible runs on 2 workers: 4 equal ensembles rather than 8 + 8 + 4
    many = grid(seeds=10, **{"model.pos_encoding": ["none"], "train.lr": [1e-3, 2e-3]})
    assert sorted(len(j) for j in plan_jobs(many, tmp_path, min_jobs=2)) == [5, 5, 5, 5]
    # scalar hyperparameters may differ inside an ensemble, shapes may not
    lrs = grid(seeds=1, **{"train.lr": [1e-3, 2e-3]})
    assert sorted(len(j) for j in plan_jobs(lrs, tmp_path)) == [2, 2]
    widths = grid(seeds=1, **{"model.d_model": [8, 16]})
    assert sorted(len(j) for j in plan_jobs(widths, tmp_path)) == [1, 1, 1, 1]


def test_a_config_trains_as_a_member_only_when_the_sweep_holds_a_partner_for_it():
    # 2 cells x 2 seeds: every config has a partner, so all are members, also when the
    # planner gives each worker a job of one; the ids do not depend on the workers
    paired = grid(seeds=2)
    assert executions(paired, ensemble=True) == ["ensemble"] * 4
    assert sorted(len(j) for j in plan_jobs(paired, "unused", min_jobs=4)) == [1, 1, 1, 1]
    assert all(run_id.endswith("-ensemble") for run_id in sweep_run_ids(paired, True))
    # one seed per width: no config can join another, so each trains alone under its lone id
    widths = grid(seeds=1, **{"model.d_model": [8, 16]})
    assert executions(widths, ensemble=True) == ["alone"] * 4
    assert sweep_run_ids(widths, True) == [config.run_id() for config in widths]
    assert executions(paired, ensemble=False) == ["alone"] * 4


def test_placement_is_stated_and_overridable():
    workers, threads, why = plan_placement(n_jobs=1)
    assert workers == 1 and threads >= 1 and "core" in why
    assert plan_placement(n_jobs=10, workers=3, threads=2)[:2] == (3, 2)


def test_sweep_with_ensembles_matches_sweep_without(tmp_path):
    configs = grid(seeds=2)
    with_ensembles = run_configs(configs, tmp_path / "a", workers=1, quiet=True,
                                 printer=lambda _: None)
    alone = run_configs(configs, tmp_path / "b", workers=1, quiet=True, ensemble=False,
                        printer=lambda _: None)
    assert [s.get("ensemble_size") for s in with_ensembles] == [2, 2, 2, 2]
    assert all("ensemble_size" not in s for s in alone)
    for a, b in zip(with_ensembles, alone):
        # the same config, kept apart: batched kernels round differently from a lone run's
        assert a["run_id"] == b["run_id"] + "-ensemble" and a["step"] == b["step"]
        assert (a["execution"], b["execution"]) == ("ensemble", "alone")
        for key, value in b["final"].items():
            if key.startswith("weight_norm") or key.endswith("loss"):
                assert abs(a["final"][key] - value) <= 1e-4 * max(1.0, abs(value)), key
    # a finished ensemble sweep is not retrained
    again = run_configs(configs, tmp_path / "a", workers=1, quiet=True, printer=lambda _: None)
    assert [json.dumps(s, sort_keys=True) for s in again] == [
        json.dumps(s, sort_keys=True) for s in with_ensembles]


def test_sweep_backend_mistakes_are_clear_errors(tmp_path, capsys):
    from sglab.cli import main

    spec = tmp_path / "s.yaml"
    spec.write_text("base: {task: {name: addition}}\n")
    runs = ["--runs-dir", str(tmp_path / "r")]
    assert main(["sweep", str(spec), "--backend", "slurm", *runs]) == 2
    assert "unknown backend 'slurm'; available: local, ray" in capsys.readouterr().err
    assert main(["sweep", str(spec), "--address", "host:6379", *runs]) == 2
    assert "--address only applies to --backend ray" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_parameter_count_for_the_gpu_planner_falls_back_to_the_cpu():
    """Some torch versions cannot build a model on the meta device (a frozen-row mask needs
    real values, as in the topics models' uniform attention): the planner then counts the
    parameters of a CPU-built model instead of failing."""
    import torch

    from sglab.config import build_run_config
    from sglab.models import build_model
    from sglab.tasks import build_task
    from sglab.train.ensemble_cost import count_parameters

    config = build_run_config(TINY, [])
    task = build_task(config.task)
    expected = sum(p.numel() for p in build_model(config.model, len(task.vocab), task.max_length)
                   .parameters())
    devices = []

    def meta_unsupported(*args):
        devices.append(torch.empty(0).device.type)
        if devices[-1] == "meta":
            raise NotImplementedError("no meta kernel")
        return build_model(*args)

    assert count_parameters(config, meta_unsupported) == expected
    assert devices == ["meta", "cpu"]
    assert count_parameters(config, build_model) == expected


def test_jobs_start_biggest_first_and_finished_runs_last(tmp_path):
    # workers take jobs in order: the longest run must not be the last to start
    configs = expand(SweepSpec(base=TINY, grid={"train.steps": [2, 8, 4],
                                                "model.d_model": [8, 16]}, seeds=1))
    steps = [config.train.steps for config in configs]
    order = [i for job in plan_jobs(configs, tmp_path, ensemble=False) for i in job]
    assert [steps[i] for i in order] == sorted(steps, reverse=True)
    assert order == sorted(range(len(configs)), key=lambda i: (-steps[i], i))  # ties: config order
    # work counts layer applications too: 2 steps of 4x the layers outweigh 4 steps
    short, long = (next(c for c in configs if c.train.steps == n) for n in (2, 4))
    deeper = short.model_copy(update={"model": short.model.model_copy(
        update={"n_layers": 4 * short.model.n_layers})})
    assert plan_jobs([long, deeper], tmp_path, ensemble=False) == [[1], [0]]
    assert plan_jobs([long, short], tmp_path, ensemble=False) == [[0], [1]]
    longest = order[0]
    run_dir = tmp_path / configs[longest].run_id()
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"status": "finished"}))
    order = [i for job in plan_jobs(configs, tmp_path, ensemble=False) for i in job]
    assert order[-1] == longest  # only re-recorded: instant
