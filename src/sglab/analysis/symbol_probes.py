"""Probes of a trained CTL++ sequence classifier (thesis Sec. 6.3.1, App. E.2): the
representation of each output symbol as each function produces it, and whether the
model reads that representation correctly in every two-function composition.

The functions take the model and its task (a CTL++ task: ``tables`` [functions, symbols]
with ``tables[f, s] = f(s)``, ``symbol_ids`` and ``token_ids(functions, symbols)``); their
outputs feed :mod:`sglab.analysis.symbol_clusters`.
"""

from __future__ import annotations

import numpy as np
import torch

from sglab.analysis.hooks import capture


def function_groups(tables) -> np.ndarray:
    """0 for G_a (the first half of the functions), 1 for G_b."""
    n_functions = len(tables)
    return np.arange(n_functions) // (n_functions // 2)


def classifier_inputs(model, task) -> np.ndarray:
    """[symbols, functions, d]: the classifier input of ``f s`` for every function f and
    the s with f(s) = symbol (the readout column of the NDR, the final state of the LSTM)."""
    n_symbols, n_functions = task.tables.shape[1], task.tables.shape[0]
    inverse = np.argsort(task.tables, axis=1)  # inverse[f, s'] = s with f(s) = s'
    functions = torch.arange(n_functions).repeat(n_symbols)[:, None]
    symbols = torch.from_numpy(inverse.T.reshape(-1).copy())
    ids = task.token_ids(functions, symbols)
    with torch.no_grad():
        final = capture(model, ["final"], ids, torch.ones_like(ids, dtype=torch.bool))["final"]
    return final.reshape(n_symbols, n_functions, -1).numpy()


def pair_correct(model, task, batch_size: int = 2048) -> np.ndarray:
    """[symbols, f1, f2]: whether the model gets ``f2 f1 s`` right, with s the input that
    f1 maps to the symbol (thesis App. E.2.1: the symbol is the interface between f1's
    output and f2's input)."""
    n_functions, n_symbols = task.tables.shape
    inverse = np.argsort(task.tables, axis=1)  # inverse[f, s'] = s with f(s) = s'
    middle, first, second = np.meshgrid(np.arange(n_symbols), np.arange(n_functions),
                                        np.arange(n_functions), indexing="ij")
    functions = torch.from_numpy(np.stack([first, second], -1).reshape(-1, 2))
    ids = task.token_ids(functions, torch.from_numpy(inverse[first, middle].reshape(-1)))
    labels = task.symbol_ids[torch.from_numpy(task.tables[second, middle].reshape(-1))]
    model.eval()
    with torch.no_grad():
        predicted = torch.cat([model(chunk, key_padding_mask=torch.ones_like(chunk, dtype=torch.bool)
                                     )[:, 0].argmax(-1) for chunk in ids.split(batch_size)])
    return (predicted == labels).reshape(n_symbols, n_functions, n_functions).numpy()


__all__ = ["classifier_inputs", "function_groups", "pair_correct"]
