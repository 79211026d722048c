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


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_address_that_never_answers_times_out_with_a_clear_error():
    import socket
    import time

    from sglab.errors import SglabError
    from sglab.sweep.ray_backend import check_reachable

    # a listener whose one-slot backlog is taken: further connections hang, as to a dead host
    with socket.socket() as listener, socket.socket() as taken:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        taken.connect(listener.getsockname())
        started = time.monotonic()
        with pytest.raises(SglabError, match="did not answer within 1 s"):
            check_reachable(f"127.0.0.1:{listener.getsockname()[1]}", timeout=1)
        assert time.monotonic() - started < 10


def test_a_bogus_address_or_ray_address_is_an_error_not_a_hang(tmp_path, monkeypatch, capsys):
    import json
    import time

    from sglab.cli import main

    assert not ray.is_initialized()
    monkeypatch.setenv("SGLAB_RAY_CONNECT_TIMEOUT", "2")
    spec = tmp_path / "grid.yaml"
    spec.write_text(json.dumps({"name": "r", "base": TINY}))
    argv = ["sweep", str(spec), "--backend", "ray", "--runs-dir", str(tmp_path / "runs"),
            "--out", str(tmp_path / "out")]
    started = time.monotonic()
    assert main([*argv, "--address", f"127.0.0.1:{_closed_port()}"]) == 2
    assert "cannot reach a Ray cluster at '127.0.0.1:" in capsys.readouterr().err
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")  # picked up without --address
    assert main(argv) == 2
    assert "cannot reach a Ray cluster" in capsys.readouterr().err
    assert time.monotonic() - started < 30
    assert not ray.is_initialized() and not (tmp_path / "out").exists()


def test_the_address_help_says_ray_may_join_a_cluster_of_this_host(capsys):
    from sglab.cli import main

    assert main(["sweep", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "RAY_ADDRESS" in text and "--address local" in text
