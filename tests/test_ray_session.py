"""`sglab run --backend ray` without a running Ray: the backend starts its own local instance
for all of an experiment's stages and shuts it down afterwards (its own module: the other Ray
tests keep one instance up for their whole module)."""

import pytest

from sglab.sweep import SweepSpec, expand
from sglab.sweep.backends import backend_session, train_configs
from tests.test_store_and_sweep import TINY

ray = pytest.importorskip("ray")


def test_a_ray_session_spans_several_trainings_and_ends_with_them(tmp_path):
    assert not ray.is_initialized()
    configs = expand(SweepSpec(base=TINY, grid={"model.pos_encoding": ["learned", "none"]}))
    with backend_session("ray"):
        first = train_configs(configs[:1], tmp_path, backend="ray", threads=1, printer=print)
        assert ray.is_initialized()  # still up for the next stage
        second = train_configs(configs, tmp_path, backend="ray", threads=1, printer=print)
    assert not ray.is_initialized()
    assert [s["status"] for s in first + second] == ["finished"] * 3
    assert second[0]["run_id"] == first[0]["run_id"]  # the first stage's run is reused
