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
    bases = [x["run_id"] for x in labels if x["role"] == "base"]
    masks = [x for x in labels if x["role"] == "mask"]
    assert len(bases) == 1 and {m["mask"] for m in masks} == {"full", *experiment(name).subsets}
    for mask in masks:  # every mask run masks the base run of its seed
        config = (tmp_path / "runs" / mask["run_id"] / "config.yaml").read_text()
        assert f"base_run: {bases[0]}" in config
    ids = {c["id"] for c in results["claims"]}
    assert {"mask-specializes", "inverted-mask-fails-own", "full-mask-keeps-accuracy"} <= ids
    tables = results["sections"][0]["tables"]
    assert tables[0]["columns"][:3] == ["tested", "none", "full"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["experiment"] == name
