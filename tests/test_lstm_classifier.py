"""The LSTM sequence classifier's switches for the CTL++ code's Bi-LSTM (thesis App. E.1.2):
an end token, embeddings as wide as the state, dropout on the embeddings only."""

import pytest
import torch

from sglab import registry
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models.rnn import LSTMClassifier, LSTMClassifierConfig
from sglab.models.transformer import build_model
from sglab.tasks import build_task

VOCAB = 12


def bilstm(**fields) -> LSTMClassifier:
    torch.manual_seed(0)
    config = LSTMClassifierConfig(d_model=16, bidirectional=True, dropout=0.0, **fields)
    return LSTMClassifier(config, VOCAB).eval()


def by_hand(model: LSTMClassifier, row: list[int]) -> torch.Tensor:
    """One unpadded row through the embedding, both directions and the head."""
    embedded = model.embedding(torch.tensor(row)[None])
    outputs = model.lstm(embedded)[0][0]
    state = torch.cat([outputs[-1, : model.hidden], outputs[0, model.hidden:]])
    return model.head(state)


def test_end_token_follows_each_rows_last_real_token_in_a_padded_batch():
    model = bilstm(end_token=True)
    rows = [[3, 5, 7, 2], [4, 1], [9, 8, 6]]
    ids = torch.zeros(3, 4, dtype=torch.long)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), True
    with torch.no_grad():
        logits = model(ids, key_padding_mask=mask)[:, 0]
        for i, row in enumerate(rows):  # the end token is the embedding's extra row, id VOCAB
            assert torch.allclose(logits[i], by_hand(model, row + [VOCAB]), atol=1e-6)
        assert not torch.allclose(logits[1], by_hand(model, rows[1]), atol=1e-3)
    assert model.embedding.num_embeddings == VOCAB + 1 == bilstm().embedding.num_embeddings + 1


def test_embedding_width_sets_the_lstm_input_and_defaults_to_one_direction():
    assert bilstm().embedding.embedding_dim == 8 == bilstm().lstm.input_size
    wide = bilstm(embedding_width=16)
    assert wide.embedding.embedding_dim == 16 == wide.lstm.input_size and wide.hidden == 8


def test_final_dropout_off_drops_the_embeddings_but_not_the_final_state():
    state = torch.ones(64, 16)
    for final_dropout, dropped in ((True, True), (False, False)):
        torch.manual_seed(0)
        model = LSTMClassifier(LSTMClassifierConfig(d_model=16, bidirectional=True, dropout=0.5,
                                                    final_dropout=final_dropout), VOCAB).train()
        plain = model.head(state).view(64, 1, -1)
        assert torch.allclose(model.read(state), plain) != dropped
        ids = torch.randint(1, VOCAB, (64, 5))
        assert not torch.equal(model(ids), model(ids))  # the embeddings are dropped either way


def test_switches_without_effect_are_refused():
    for fields, needs in (({"input_mode": "repeat", "end_token": True}, "input_mode=tokens"),
                          ({"input_mode": "repeat", "embedding_width": 8}, "input_mode=tokens"),
                          ({"dropout": 0.0, "final_dropout": False}, "dropout > 0")):
        with pytest.raises(SglabError, match=needs):
            build_run_config({"task": {"name": "ctl"}, "model": {"name": "lstm", **fields}})


def test_ctlpp_paper_bilstm_has_the_thesis_parameter_count():
    """Table E.1: 408k parameters. The LSTM itself: 2 directions x 4 gates x 128 x (256 +
    128 + 2 biases); sglab's head and embedding also hold the vocabulary's other tokens."""
    for name in ("ctlpp", "ctlpp-staged"):
        experiment = registry.experiment(name)
        lstm = next(c for c in experiment.configs(experiment.preset("paper"), [])
                    if c.model.name == "lstm")
        assert (lstm.model.end_token, lstm.model.embedding_width,
                lstm.model.final_dropout) == (True, 256, False)
        task = build_task(lstm.task.model_copy(update={"train_size": 1000}))
        model = build_model(lstm.model, len(task.vocab), task.max_length)
        assert sum(p.numel() for p in model.lstm.parameters()) == 2 * 4 * 128 * (256 + 128 + 2)
        assert sum(p.numel() for p in model.parameters()) == pytest.approx(408_000, rel=0.03)
