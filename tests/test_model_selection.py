"""Model-selection analyses on hand-made evaluation curves."""

import math

import pytest

from sglab.analysis.model_selection import (
    early_stopping_report,
    loss_accuracy_correlation,
    simulate_early_stopping,
    steps_to_fraction,
)
from sglab.errors import SglabError


def _records(iid_loss, ood_acc, ood_loss=None, iid_acc=None):
    out = []
    for i, (loss, acc) in enumerate(zip(iid_loss, ood_acc)):
        record = {"step": 100 * (i + 1), "iid_valid/loss": loss, "ood_test/exact_match": acc}
        if ood_loss is not None:
            record["ood_test/loss"] = ood_loss[i]
        if iid_acc is not None:
            record["iid_valid/exact_match"] = iid_acc[i]
        out.append(record)
    return out


def test_early_stopping_keeps_the_best_loss_checkpoint_after_patience_runs_out():
    # IID loss is best at step 300, then never improves; OOD accuracy keeps rising
    records = _records([0.5, 0.3, 0.1, 0.2, 0.15, 0.12, 0.11, 0.2, 0.3],
                       [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9])
    kept = simulate_early_stopping(records, patience=3)
    assert kept["step"] == 300 and kept["stopped_at"] == 600
    report = early_stopping_report(records, patience=3)
    assert report["early_stop_ood"] == 0.2 and report["final_ood"] == 0.9
    assert report["best_ood"] == 0.9 and report["best_ood_step"] == 900


def test_early_stopping_that_never_triggers_keeps_the_overall_best():
    records = _records([0.5, 0.4, 0.45, 0.3, 0.35], [0.1, 0.2, 0.3, 0.4, 0.5])
    kept = simulate_early_stopping(records, patience=2)
    assert kept["step"] == 400 and kept["stopped_at"] is None
    assert simulate_early_stopping(records, "ood_test/exact_match", 2, mode="max")["step"] == 500


def test_bad_early_stopping_arguments_are_clear_errors():
    records = _records([0.5], [0.1])
    with pytest.raises(SglabError, match="logged metrics"):
        simulate_early_stopping(records, monitor="valid/loss")
    with pytest.raises(SglabError, match="patience"):
        simulate_early_stopping(records, patience=0)


def test_loss_accuracy_correlation_sign():
    iid_falls = _records([1.0, 0.5, 0.2, 0.1], [0, 0, 0, 0], iid_acc=[0.1, 0.5, 0.8, 0.99])
    assert loss_accuracy_correlation(iid_falls, "iid_valid") == pytest.approx(-1.0)
    # generalization split: loss and accuracy rising together (thesis Fig. 4.2)
    rise_together = _records([1, 1, 1, 1], [0.1, 0.2, 0.4, 0.3], ood_loss=[1.0, 2.0, 4.0, 3.0])
    assert loss_accuracy_correlation(rise_together, "ood_test") == pytest.approx(1.0)
    flat = _records([1, 1, 1, 1], [0.0, 0.0, 0.0, 0.0], ood_loss=[1.0, 2.0, 4.0, 3.0])
    assert math.isnan(loss_accuracy_correlation(flat, "ood_test"))


def test_steps_to_fraction_of_final_accuracy():
    records = _records([1] * 5, [0.0, 0.5, 0.79, 0.81, 0.9])
    assert steps_to_fraction(records, "ood_test/exact_match", 0.8) == 300  # first >= 0.72
    assert steps_to_fraction(records, "ood_test/exact_match", 0.5) == 200
    assert steps_to_fraction(_records([1, 1], [0.3, 0.0]), "ood_test/exact_match") is None
