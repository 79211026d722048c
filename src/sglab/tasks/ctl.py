"""Compositional table lookup (CTL; thesis Sec. 5.2.1 and appendix D.4.1).

Eight symbols (3-bit strings, one token each) and ``n_functions`` random bijections
named by letters. An example is a symbol and a list of functions applied in order:
forward ``101 d a b`` = b(a(d(101))), backward ``b a d 101`` (the same expression
written the other way around); the label is the resulting symbol. Inputs are framed
by begin/end tokens (``boundary_tokens``), where encoders read out.

Splits by number of functions: ``train`` 1-5 (every single application of every
function to every symbol once, then distinct compositions: each length 2-5 gets an
equal share, and a length with fewer distinct sequences than its share gives the rest
to the longer ones -- as the thesis code's deduplicating sampler does, App. D.4.1 --
so that short compositions cannot be learned by rote), ``iid_valid``
(lengths 2-5, sequences held out of training), ``ood_valid`` 6-8 (model selection)
and ``ood_test`` 9-10, each balanced over its lengths.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from sglab import registry
from sglab.tasks.base import (
    BEGIN,
    END,
    Batch,
    ClassificationSplit,
    ClassificationTaskConfig,
    SequenceClassificationTask,
    Vocabulary,
    check_split_ranges,
    encode_examples,
)


class CTLConfig(ClassificationTaskConfig):
    name: Literal["ctl"] = "ctl"
    direction: Literal["forward", "backward"] = Field(
        "forward", description="forward: 'symbol f1 f2 ...'; backward: '... f2 f1 symbol'.")
    n_symbols: int = Field(8, ge=2, le=64)
    n_functions: int = Field(9, ge=1, le=26)
    train_lengths: tuple[int, int] = Field((1, 5), description="Inclusive range of training lengths.")
    ood_valid_lengths: tuple[int, int] = (6, 8)
    test_lengths: tuple[int, int] = (9, 10)
    train_size: int = Field(50_000, ge=1, description="Training examples (single applications included).")
    iid_valid_size: int = Field(1000, ge=1)
    ood_valid_size: int = Field(1000, ge=1)
    test_size: int = Field(1000, ge=1)
    iid_holdout_fraction: float = Field(
        0.25, gt=0, lt=1, description="At most this fraction of each length's distinct sequences "
                                      "is held out of training for iid_valid.")
    boundary_tokens: bool = Field(True, description="Frame inputs with <B> ... <E>.")
    singles: Literal["balanced", "once"] = Field(
        "once", description="once: each single application appears exactly once (thesis); "
                            "balanced: they get the same share of the training set as every "
                            "other length (each one at least once, then repeated).")
    compositions: Literal["distinct", "repeated"] = Field(
        "distinct", description="distinct: training compositions are distinct sequences; a length "
                                "with too few gives its share to the longer lengths (thesis). "
                                "repeated: every length gets an equal share of uniform draws, "
                                "short compositions repeat (easy to memorize).")
    train_sampling: Literal["dataset", "bucketed", "uniform"] = Field(
        "dataset", description="How training batches are drawn. dataset: uniform draws from the "
                               "fixed training set, lengths mixed within a batch. bucketed: every "
                               "batch holds one length, picked with probability proportional to "
                               "its share of the training set (the thesis code's length-bucketed "
                               "sampler: same length mix, one length per batch). uniform: every "
                               "example draws its length uniformly from train_lengths and a fresh "
                               "random sequence of that length not held out for iid_valid.")
    batch_lengths: Literal["mixed", "one"] = Field(
        "mixed", description="With train_sampling=uniform: mixed: every example draws its own "
                             "length; one: one length per batch, uniform over train_lengths "
                             "(no padding). train_sampling=bucketed is the one-length sampler "
                             "of the fixed set.")

    @model_validator(mode="after")
    def _check_lengths(self):
        check_split_ranges("length", self.train_lengths, self.ood_valid_lengths,
                           self.test_lengths)
        if self.train_lengths[1] < 2:
            raise ValueError("train_lengths must include compositions (upper bound >= 2)")
        if self.batch_lengths == "one" and self.train_sampling != "uniform":
            raise ValueError("batch_lengths=one needs train_sampling=uniform (for one length per "
                             "batch from the fixed training set use train_sampling=bucketed)")
        return self

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "ood_valid", "ood_test"]


def sequence_codes(functions: np.ndarray, symbols: np.ndarray, n_functions: int,
                   n_symbols: int) -> np.ndarray:
    """A unique integer per (function list, symbol) of one length."""
    weights = n_functions ** np.arange(functions.shape[1], dtype=np.int64)
    return symbols.astype(np.int64) + n_symbols * (functions.astype(np.int64) @ weights)


class CTLTask(SequenceClassificationTask):
    config: CTLConfig
    eval_splits = ["iid_valid", "ood_valid", "ood_test"]

    def build(self):
        cfg = self.config
        rng = np.random.default_rng(cfg.data_seed)
        self.tables = np.stack([rng.permutation(cfg.n_symbols) for _ in range(cfg.n_functions)])
        bits = max(int(np.ceil(np.log2(cfg.n_symbols))), 1)
        self.symbol_names = [format(i, f"0{bits}b") for i in range(cfg.n_symbols)]
        self.function_names = [chr(ord("a") + i) for i in range(cfg.n_functions)]
        vocab = Vocabulary([BEGIN, END, *self.symbol_names, *self.function_names])

        low, high = cfg.train_lengths
        compositions = list(range(max(low, 2), high + 1))
        iid_per_length = _split_evenly(cfg.iid_valid_size, len(compositions))
        n_singles = cfg.n_functions * cfg.n_symbols if low <= 1 else 0
        if low <= 1 and cfg.singles == "balanced":
            n_singles = max(n_singles, cfg.train_size // (len(compositions) + 1))
        train_per_length = _split_evenly(max(cfg.train_size - n_singles, 0), len(compositions))
        train, iid = [], []
        if low <= 1:
            f, s = np.meshgrid(np.arange(cfg.n_functions), np.arange(cfg.n_symbols), indexing="ij")
            f, s = f.reshape(-1, 1), s.reshape(-1)
            extra = rng.integers(len(s), size=n_singles - len(s))
            train.append((np.concatenate([f, f[extra]]), np.concatenate([s, s[extra]])))
        carry = 0  # distinct mode: the unfilled share of shorter lengths
        for k, (length, n_train, n_iid) in enumerate(
                zip(compositions, train_per_length, iid_per_length)):
            population = cfg.n_functions**length * cfg.n_symbols
            n_iid = min(n_iid, int(population * cfg.iid_holdout_fraction))
            held_f, held_s = self._distinct(rng, length, n_iid)
            held = set(sequence_codes(held_f, held_s, cfg.n_functions, cfg.n_symbols).tolist())
            iid.append((held_f, held_s))
            if cfg.compositions == "repeated":
                train.append(self._sample(rng, length, n_train, exclude=held))
                continue
            passed_on = carry // (len(compositions) - k)  # an equal part of the unfilled share
            n = min(n_train + passed_on, population - len(held))
            carry += n_train - n
            train.append(self._distinct(rng, length, n, exclude=held))
        self.held_out = {length: np.sort(sequence_codes(f, s, cfg.n_functions, cfg.n_symbols))
                         for length, (f, s) in zip(compositions, iid)}
        self.symbol_ids = torch.tensor(vocab.encode(self.symbol_names))
        self.function_ids = torch.tensor(vocab.encode(self.function_names))
        self.boundary_ids = tuple(vocab.encode([BEGIN, END]))
        splits = {"train": self._encode(vocab, train), "iid_valid": self._encode(vocab, iid)}
        for name, (a, b), size in (("ood_valid", cfg.ood_valid_lengths, cfg.ood_valid_size),
                                   ("ood_test", cfg.test_lengths, cfg.test_size)):
            lengths = list(range(a, b + 1))
            parts = [self._distinct(rng, length, n)
                     for length, n in zip(lengths, _split_evenly(size, len(lengths)))]
            splits[name] = self._encode(vocab, parts)
        return vocab, splits

    # ------------------------------------------------------------------ training batches
    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        if self.config.train_sampling == "uniform":
            return self._fresh_batch(batch_size, generator)
        return super().train_batch(batch_size, generator)  # dataset, bucketed

    def _fresh_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """Lengths uniform over ``train_lengths`` (``batch_lengths=one``: one draw for the
        whole batch, which is then as wide as that length needs); each example a fresh random
        sequence of its length (never one held out for iid_valid)."""
        cfg = self.config
        low, high = cfg.train_lengths
        one_length = cfg.batch_lengths == "one"
        lengths = torch.randint(low, high + 1, (1 if one_length else batch_size,),
                                generator=generator).expand(batch_size)
        width = (int(lengths[0]) if one_length else high) + (3 if cfg.boundary_tokens else 1)
        tokens = torch.zeros(batch_size, width, dtype=torch.long)
        labels = torch.zeros(batch_size, dtype=torch.long)
        for length in torch.unique(lengths).tolist():
            rows = torch.nonzero(lengths == length).flatten()
            functions, symbols = self._draw_fresh(length, len(rows), generator)
            tokens[rows, : length + 1 + 2 * cfg.boundary_tokens] = self._token_ids(functions,
                                                                                  symbols)
            labels[rows] = self.symbol_ids[torch.from_numpy(self.apply(functions.numpy(),
                                                                       symbols.numpy()))]
        split = ClassificationSplit(tokens, lengths + 1 + 2 * cfg.boundary_tokens, labels,
                                    {"length": lengths})
        return split.batch()

    def _draw_fresh(self, length: int, n: int, generator: torch.Generator
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """n uniform random (functions, symbol) pairs of one length outside iid_valid."""
        cfg = self.config
        held = self.held_out.get(length, np.zeros(0, np.int64))
        functions = torch.randint(cfg.n_functions, (n, length), generator=generator)
        symbols = torch.randint(cfg.n_symbols, (n,), generator=generator)
        while True:
            codes = sequence_codes(functions.numpy(), symbols.numpy(), cfg.n_functions,
                                   cfg.n_symbols)
            bad = torch.from_numpy(np.isin(codes, held))
            if not bad.any():
                return functions, symbols
            k = int(bad.sum())
            functions[bad] = torch.randint(cfg.n_functions, (k, length), generator=generator)
            symbols[bad] = torch.randint(cfg.n_symbols, (k,), generator=generator)

    def _token_ids(self, functions: torch.Tensor, symbols: torch.Tensor) -> torch.Tensor:
        """Token ids of the inputs, laid out as :meth:`_encode` does."""
        names = self.function_ids[functions]
        symbol = self.symbol_ids[symbols][:, None]
        body = (torch.cat([symbol, names], 1) if self.config.direction == "forward"
                else torch.cat([names.flip(1), symbol], 1))
        if not self.config.boundary_tokens:
            return body
        begin, end = (torch.full_like(symbol, i) for i in self.boundary_ids)
        return torch.cat([begin, body, end], 1)

    # ------------------------------------------------------------------ generation
    def _sample(self, rng, length: int, n: int, exclude: set[int]) -> tuple[np.ndarray, np.ndarray]:
        """n uniform draws (repeats allowed) of sequences of one length not in ``exclude``."""
        cfg = self.config
        got_f, got_s, have = [], [], 0
        while have < n:
            f = rng.integers(cfg.n_functions, size=(2 * (n - have) + 16, length))
            s = rng.integers(cfg.n_symbols, size=len(f))
            keep = ~np.isin(sequence_codes(f, s, cfg.n_functions, cfg.n_symbols),
                            np.fromiter(exclude, np.int64, len(exclude)))
            f, s = f[keep][: n - have], s[keep][: n - have]
            got_f.append(f)
            got_s.append(s)
            have += len(f)
        return np.concatenate(got_f), np.concatenate(got_s)

    def _distinct(self, rng, length: int, n: int, exclude: set[int] = frozenset()
                  ) -> tuple[np.ndarray, np.ndarray]:
        """n distinct sequences of one length, none in ``exclude`` (all if fewer exist)."""
        cfg = self.config
        population = cfg.n_functions**length * cfg.n_symbols
        banned = np.fromiter(exclude, np.int64, len(exclude))
        n = min(n, population - len(banned))
        if population <= 4 * (n + len(banned)):
            codes = rng.permutation(population)
            codes = codes[~np.isin(codes, banned)][:n]
        else:
            codes = np.unique(rng.integers(population, size=2 * n))
            codes = codes[~np.isin(codes, banned)]
            while len(codes) < n:
                more = rng.integers(population, size=n)
                codes = np.unique(np.concatenate([codes, more[~np.isin(more, banned)]]))
            codes = rng.permutation(codes)[:n]
        symbols = codes % cfg.n_symbols
        rest = codes // cfg.n_symbols
        functions = np.stack([(rest // cfg.n_functions**k) % cfg.n_functions
                              for k in range(length)], axis=1)
        return functions, symbols

    def apply(self, functions: np.ndarray, symbols: np.ndarray) -> np.ndarray:
        """Result symbols: functions[:, 0] is applied first."""
        value = symbols.copy()
        for k in range(functions.shape[1]):
            value = self.tables[functions[:, k], value]
        return value

    def _encode(self, vocab: Vocabulary, parts) -> ClassificationSplit:
        inputs, answers, lengths = [], [], []
        for functions, symbols in parts:
            results = self.apply(functions, symbols)
            for f, s, r in zip(functions.tolist(), symbols.tolist(), results.tolist()):
                names = [self.function_names[i] for i in f]
                body = ([self.symbol_names[s], *names] if self.config.direction == "forward"
                        else [*names[::-1], self.symbol_names[s]])
                inputs.append([BEGIN, *body, END] if self.config.boundary_tokens else body)
                answers.append(self.symbol_names[r])
                lengths.append(len(f))
        return encode_examples(vocab, inputs, answers, {"length": lengths})


def _split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, max(parts, 1))
    return [base + (i < extra) for i in range(parts)]


@registry.register("task", "ctl", CTLConfig, "compositional table lookup (NDR, thesis Sec. 5.2.1)")
def make_ctl(config: CTLConfig) -> CTLTask:
    return CTLTask(config)
