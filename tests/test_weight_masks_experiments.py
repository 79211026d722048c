"""The weight-mask experiments at their quick presets, end to end (two stages: base nets,
then masks on them)."""

import json

import pytest

from sglab.experiments.base import run_experiment
from sglab.registry import experiment


@pytest.mark.parametrize("name", ["masks-add-mul", "masks-double-add"])
def test_quick_preset_end_to_end(name, tmp_path):
    results = run_experiment(experiment(name), "quick", tmp_path / "out", tmp_path / "runs",
                             workers=1, threads=1, printer=lambda line: None)
    labels = results["labels"]
    models = results["params"]["models"]
    assert "FNN" in models and any(m.startswith("LSTM") for m in models)
    bases = {x["model"]: x["run_id"] for x in labels if x["role"] == "base"}
    masks = [x for x in labels if x["role"] == "mask"]
    assert set(bases) == set(models)
    assert len(masks) == len(models) * (1 + len(experiment(name).subsets))
    for mask in masks:  # every mask run masks the base run of its model
        config = (tmp_path / "runs" / mask["run_id"] / "config.yaml").read_text()
        assert f"base_run: {bases[mask['model']]}" in config
    ids = {c["id"] for c in results["claims"]}
    assert {f"{claim}[{model}]" for model in models for claim in
            ("mask-specializes", "inverted-mask-fails-own", "full-mask-keeps-accuracy")} <= ids
    # the quick nets do not learn the task, so no claim is judged on them
    assert all(c["passed"] is None for c in results["claims"])
    tables = results["sections"][0]["tables"]
    assert tables[0]["columns"][:3] == ["tested", "none", "full"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["experiment"] == name
