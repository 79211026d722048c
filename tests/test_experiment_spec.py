"""Spec files: presets as data checked against a typed model, before anything trains."""

import textwrap

import pytest
import yaml

from sglab import registry
from sglab.cli import main
from sglab.errors import SglabError
from sglab.experiments.spec import ExperimentParams, SpecLoader, load_spec, unshared


class Params(ExperimentParams):
    steps: int
    widths: list[int]


def write_spec(tmp_path, body: str):
    path = tmp_path / "demo.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_spec_loads_its_presets_and_claims(tmp_path):
    spec = load_spec(write_spec(tmp_path, """
        title: Demo
        anchors: {common: &common {steps: 10, widths: [1, 2]}}
        presets:
          quick: {<<: *common, seeds: [0]}
          default: {<<: *common, seeds: [0, 1, 2], steps: 1e3}
        claims:
          c: {statement: s, source: {document: d.txt, where: Fig. 1}, effect: ["x ≥ 0.5"]}
        scale:
          default: d 64 instead of 256
          faithful_cpu: not measured
          paper_gpu: not measured
        """), Params, "demo")
    assert spec.title == "Demo" and list(spec.claims) == ["c"]
    assert spec.scale.default == "d 64 instead of 256"
    assert spec.presets["default"]["steps"] == 1000.0  # 1e3 is a number, not a string


@pytest.mark.parametrize("body, message", [
    ("presets: {quick: {seeds: [0], steps: 1, widths: [1], stepz: 2}}", "unknown key 'stepz'"),
    ("presets: {quick: {seeds: [0], steps: many, widths: [1]}}", "steps"),
    ("presets: {quick: {seeds: [], steps: 1, widths: [1]}}", "seeds"),
    ("presets: {default: {seeds: [0], steps: 1, widths: [1]}}", "include quick"),
    ("presets: {quick: {seeds: [0], steps: 1, widths: [1]}}\nclaim: {}", "unknown keys"),
    ("presets: {quick: {seeds: [0], steps: 1, widths: [1]}}\n"
     "claims: {c: {statement: s, source: {document: d, where: w}, effect: ['|x| ≥ 1']}}",
     "claim 'c'"),
    ("presets: {quick: {seeds: [0], steps: 1, widths: [1]}}\n"
     "scale: {default: d, faithful_cpu: c, paper_gpu: g, gpu: h}", "scale: unknown key 'gpu'"),
    ("presets: {quick: {seeds: [0], steps: 1, widths: [1]}}\n"
     "scale: {default: d, faithful_cpu: '', paper_gpu: g}", "scale: faithful_cpu = ''"),
])
def test_bad_specs_are_refused_with_the_place_named(tmp_path, body, message):
    with pytest.raises(SglabError, match=message):
        load_spec(write_spec(tmp_path, body), Params, "demo")


def test_merging_two_mappings_that_share_a_key_is_refused():
    good = "a: &a {x: 1}\nb: &b {y: 2}\nc: {<<: [*a, *b]}\n"
    assert yaml.load(good, Loader=SpecLoader)["c"] == {"x": 1, "y": 2}
    with pytest.raises(yaml.YAMLError, match="comes from two merged mappings"):
        yaml.load("a: &a {x: 1}\nb: &b {x: 2}\nc: {<<: [*a, *b]}\n", Loader=SpecLoader)


def test_aliases_do_not_tie_values_together():
    data = yaml.load("a: &a {steps: [1, 2]}\nb: *a\n", Loader=SpecLoader)
    copy = unshared(data)
    copy["a"]["steps"].append(3)
    assert copy["b"]["steps"] == [1, 2]


def test_a_param_change_reaches_only_the_key_it_names():
    experiment = registry.experiment("symmetry")
    params = experiment.preset("quick", changes=["base.train.steps=7"])
    assert params["base"]["train"]["steps"] == 7
    assert experiment.preset("quick")["base"]["train"]["steps"] == 300


def test_every_registered_spec_loads_and_every_preset_validates():
    for name, experiment in registry.experiments().items():
        for preset in experiment.presets:
            assert experiment.preset(preset)["seeds"] is not None, (name, preset)
        assert experiment.spec.claims, name
        # the scorecard says how far default is from the seed's setup, for every experiment
        assert experiment.spec.scale is not None, f"{name}: no scale block in its spec"


def test_a_param_of_the_wrong_type_is_one_clear_error_before_training(tmp_path, capsys):
    code = main(["run", "symmetry", "--preset", "quick", "--param", "bidirectional_steps=many",
                 "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "invalid parameters of symmetry:quick" in err
    assert "bidirectional_steps" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()
