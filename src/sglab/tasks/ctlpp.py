"""CTL++: systematicity splits of compositional table lookup (thesis Ch. 6, App. E).

Eight symbols ``0``-``7`` and 32 random bijections named ``a``-``z``, ``A``-``F``, split
for 'A' and 'R' into two groups, G_a = functions 0-15 and G_b = 16-31. Inputs are
written right to left: ``c b a 3`` = c(b(a(3))); the label is the resulting symbol.
Inputs are framed by ``<B>`` / ``<E>`` (``boundary_tokens``).

Variants (which adjacent function pairs training shows):

- ``A`` (alternating): training sequences switch group at every step; the OOD test
  draws every function of a sequence from one group.
- ``R`` (repeating): training sequences stay in one group; the OOD test alternates.
- ``S`` (staged): five groups G_o, G_a1, G_a2, G_b1, G_b2; training chains pairs
  (G_p1, G_p2 ∪ G_o) with G_o restricted to symbol sets S_p^f, the OOD test chains
  (G_p1, the other path's G_q2); ``shared_functions`` = |G_o|, ``shared_symbols`` =
  |S_a^f ∩ S_b^f| (thesis Fig. 6.4 axes). See :mod:`sglab.tasks.ctlpp_staged`.

'A' and 'R' train on all 256 single applications (so every function meets every
symbol; thesis Sec. 6.2) and compositions of 2-6 functions from the training graph.
``singles: false`` leaves the single applications out, as the authors' code does (its
training sequences hold 2-6 functions, ``dataset/function_interface_test_*.py``). Splits:
``iid_test`` (1,000 sequences of the training graph, lengths 2-6, never trained on)
and ``ood_test`` (1,000 sequences of the other graph, lengths 2-6); every OOD
composition puts next to each other two functions that training never put together.

``lengths`` picks the training length mix. ``thesis``: a fixed set of ``train_size``
examples, at most ``max_fraction`` of each length's distinct sequences, lengths
balanced where possible (so short compositions are rare: 300k examples give length 2
about 0.7%). ``uniform``: every batch is fresh, lengths uniform over 1-6, sequences of
the IID test rejected (the fixed set is still built, for inspection). ``batch_lengths:
one`` gives every batch a single length, as the authors' length-bucketed sampler does, so
no batch carries padding (a step of the CPU-size NDR runs about 1.5x faster).

'S' has no single applications and only even lengths (2, 4, 6); every length-2 sequence
of its training graph trains (the authors' code adds them all, its ``pairs`` split)
except those held for the IID test, and longer lengths follow ``lengths`` as above
(``uniform``: lengths uniform over 2, 4, 6).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import check_switches
from sglab.tasks.base import (
    BEGIN,
    END,
    Batch,
    ClassificationSplit,
    ClassificationTaskConfig,
    SequenceClassificationTask,
    Vocabulary,
)
from sglab.tasks.ctl import _split_evenly, sequence_codes
from sglab.tasks.ctlpp_staged import StagedGraph, shared_symbol_sets, staged_groups

N_SYMBOLS, N_FUNCTIONS, GROUP = 8, 32, 16
SYMBOL_NAMES = [str(i) for i in range(N_SYMBOLS)]
FUNCTION_NAMES = [chr(ord("a") + i) for i in range(26)] + [chr(ord("A") + i) for i in range(6)]


class CTLPPConfig(ClassificationTaskConfig):
    name: Literal["ctlpp"] = "ctlpp"
    variant: Literal["A", "R", "S"] = Field(
        "R", description="A: training alternates groups, OOD stays in one; R: training stays in "
                         "one group, OOD alternates; S: staged pairs through a shared group G_o, "
                         "OOD pairs across paths.")
    shared_functions: int = Field(
        8, ge=0, le=28, description="'S' only: |G_o|, the first functions; the other 32 - "
                                    "shared_functions are split into G_a1, G_a2, G_b1, G_b2 "
                                    "(a multiple of 4). Thesis grid: 4, 8, 12, 16.")
    shared_symbols: int = Field(
        4, ge=0, le=8, description="'S' only: |S_a^f ∩ S_b^f| for every f in G_o, the symbols "
                                   "f may receive after both G_a1 and G_b1. Thesis grid: 2-6.")
    lengths: Literal["thesis", "uniform"] = Field(
        "thesis", description="thesis: a fixed training set, at most max_fraction of each "
                              "length's distinct sequences, lengths balanced where possible; "
                              "uniform: fresh batches with lengths uniform over 1..max_length "
                              "('S': the even ones), "
                              "IID test sequences rejected.")
    batch_lengths: Literal["mixed", "one"] = Field(
        "mixed", description="mixed: every example of a batch draws its own length; one: one "
                             "length per batch (the authors' length-bucketed sampler; "
                             "uniform: the length uniform over the training lengths, thesis: "
                             "in proportion to the training set), so no batch is padded.")
    max_length: int = Field(6, ge=2, le=8, description="Longest composition (train and tests).")
    singles: bool = Field(True, description="'A', 'R': train on the 256 single applications "
                                            "(thesis Sec. 6.2); false: compositions of 2 or "
                                            "more functions only (the authors' code).")
    pairs: bool = Field(False, description="'A', 'R' with lengths thesis: also train on every "
                                           "length-2 sequence of the training graph but the "
                                           "IID-test ones, on top of train_size (the authors' "
                                           "code: its `pairs` split, fit.train_on_pairs).")
    train_size: int = Field(300_000, ge=256, description="Fixed training set (with singles: "
                                                         "the 256 included; pairs come on top).")
    max_fraction: float = Field(0.5, gt=0, le=1, description="At most this fraction of a "
                                                               "length's distinct sequences trains.")
    iid_test_size: int = Field(1000, ge=1)
    ood_test_size: int = Field(1000, ge=1)
    boundary_tokens: bool = Field(True, description="Frame inputs with <B> ... <E>.")

    @model_validator(mode="after")
    def _check(self):
        if self.train_size > 5_000_000:
            raise ValueError("train_size above 5,000,000 is not supported")
        staged = (self.variant == "S", "variant=S")
        check_switches(self, {"shared_functions": staged, "shared_symbols": staged,
                              "singles": (self.variant != "S", "variant=A or variant=R"),
                              "pairs": (self.variant != "S" and self.lengths == "thesis",
                                        "variant=A or variant=R, and lengths=thesis ('S' "
                                        "always trains its pairs)")})
        if self.variant == "S":  # check the groups and symbol sets before building anything
            staged_groups(N_FUNCTIONS, self.shared_functions)
            shared_symbol_sets(self.shared_functions, self.shared_symbols, N_SYMBOLS,
                               np.random.default_rng(0))
        return self

    def evaluation_splits(self) -> list[str]:
        return ["iid_test", "ood_test"]


def groups_of(functions: np.ndarray) -> np.ndarray:
    """0 for G_a (functions 0-15), 1 for G_b (16-31)."""
    return np.asarray(functions) // GROUP


def graph_groups(variant: str, split: str, first: np.ndarray, length: int) -> np.ndarray:
    """Group of every position given the group of the first: ``same`` or ``alternating``
    pattern, ``split`` train (the training graph) or ood (the other one)."""
    alternating = (variant == "A") == (split == "train")
    steps = np.arange(length)[None, :] % 2 if alternating else np.zeros((1, length), np.int64)
    return (np.asarray(first)[:, None] + steps) % 2


def in_training_graph(variant: str, functions: np.ndarray) -> np.ndarray:
    """Whether each sequence (rows, application order) keeps the training adjacency rule."""
    g = groups_of(functions)
    if g.shape[1] < 2:
        return np.ones(len(g), bool)
    changes = g[:, 1:] != g[:, :-1]
    return changes.all(1) if variant == "A" else (~changes).all(1)


class CTLPPTask(SequenceClassificationTask):
    config: CTLPPConfig
    eval_splits = ["iid_test", "ood_test"]

    def build(self):
        cfg = self.config
        rng = np.random.default_rng(cfg.data_seed)
        self.tables = np.stack([rng.permutation(N_SYMBOLS) for _ in range(N_FUNCTIONS)])
        self.symbol_names, self.function_names = SYMBOL_NAMES, FUNCTION_NAMES
        vocab = Vocabulary([BEGIN, END, *SYMBOL_NAMES, *FUNCTION_NAMES])
        self.symbol_ids = torch.tensor(vocab.encode(SYMBOL_NAMES))
        self.function_ids = torch.tensor(vocab.encode(FUNCTION_NAMES))
        self.boundary_ids = tuple(vocab.encode([BEGIN, END]))
        if cfg.variant == "S":
            return vocab, self.build_staged(rng)
        compositions = list(range(2, cfg.max_length + 1))
        f, s = np.meshgrid(np.arange(N_FUNCTIONS), np.arange(N_SYMBOLS), indexing="ij")
        train, iid, ood = ([(f.reshape(-1, 1), s.reshape(-1))] if cfg.singles else []), [], []
        n_iid = _split_evenly(cfg.iid_test_size, len(compositions))
        n_ood = _split_evenly(cfg.ood_test_size, len(compositions))
        n_train = _split_evenly(cfg.train_size - N_FUNCTIONS * N_SYMBOLS * cfg.singles,
                                len(compositions))
        self.held_out, carry = {}, 0
        for k, length in enumerate(compositions):
            population = self.population(length)
            held = min(n_iid[k], population // 2)
            codes = rng.permutation(population)[:held] if population < 4 * held else \
                _distinct_ints(rng, population, held)
            iid.append(self.decode("train", length, codes))
            self.held_out[length] = np.sort(sequence_codes(*iid[-1], N_FUNCTIONS, N_SYMBOLS))
            if length == 2:
                held_pairs = codes
            wanted = n_train[k] + carry // (len(compositions) - k)
            n = min(wanted, int(population * cfg.max_fraction), population - held)
            carry += n_train[k] - n
            codes = _distinct_ints(rng, population, n, exclude=np.sort(codes))
            train.append(self.decode("train", length, codes))
            ood.append(self.decode("ood", length, _distinct_ints(rng, population, n_ood[k])))
        if cfg.pairs:  # every pair but the held-out ones, again (some are in the set already)
            every = np.setdiff1d(np.arange(self.population(2)), held_pairs)
            train.append(self.decode("train", 2, every))
        splits = {"train": self.encode(train), "iid_test": self.encode(iid),
                  "ood_test": self.encode(ood)}
        return vocab, splits

    def build_staged(self, rng: np.random.Generator) -> dict[str, ClassificationSplit]:
        """Variant 'S' (thesis Sec. 6.2): per even length, the IID test and the training
        sequences are distinct draws of the training graph, the OOD test of the crossed one."""
        cfg = self.config
        self.groups = staged_groups(N_FUNCTIONS, cfg.shared_functions)
        self.symbol_sets = shared_symbol_sets(cfg.shared_functions, cfg.shared_symbols,
                                              N_SYMBOLS, rng)
        self.train_graph = StagedGraph.training(self.tables, self.groups, *self.symbol_sets)
        self.ood_graph = StagedGraph.crossed(self.tables, self.groups)
        lengths = self.train_lengths()
        n_iid = _split_evenly(cfg.iid_test_size, len(lengths))
        n_ood = _split_evenly(cfg.ood_test_size, len(lengths))
        pairs = self.train_graph.count(2) - min(n_iid[0], self.train_graph.count(2) // 2)
        n_train = _split_evenly(max(cfg.train_size - pairs, 0), max(len(lengths) - 1, 1))
        train, iid, ood, self.held_out, carry = [], [], [], {}, 0
        for k, length in enumerate(lengths):
            count = self.train_graph.count(length)
            held = min(n_iid[k], count // 2)
            if length == 2:  # every pair trains but the held-out ones
                n = count - held
            else:
                wanted = n_train[k - 1] + carry // (len(lengths) - k)
                n = min(wanted, int(count * cfg.max_fraction), count - held)
                carry += n_train[k - 1] - n
            functions, symbols = self.train_graph.sample_distinct(rng, length, held + n)
            iid.append((functions[:held], symbols[:held]))
            train.append((functions[held:], symbols[held:]))
            self.held_out[length] = np.sort(sequence_codes(*iid[-1], N_FUNCTIONS, N_SYMBOLS))
            ood.append(self.ood_graph.sample_distinct(rng, length, n_ood[k]))
        return {"train": self.encode(train), "iid_test": self.encode(iid),
                "ood_test": self.encode(ood)}

    def train_lengths(self) -> list[int]:
        """Function counts of training sequences: 1..max_length ('A', 'R': singles and
        compositions; 2..max_length with ``singles`` off), even ones only for 'S' (chains
        of pairs)."""
        if self.config.variant == "S":
            return list(range(2, self.config.max_length + 1, 2))
        return list(range(1 if self.config.singles else 2, self.config.max_length + 1))

    # ------------------------------------------------------------------ graphs
    @staticmethod
    def population(length: int) -> int:
        """Distinct sequences of one length in either graph: first group x 16^L x symbols."""
        return 2 * GROUP**length * N_SYMBOLS

    def decode(self, split: str, length: int, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Integers in [0, population) -> (functions [n, length], symbols) of a graph."""
        codes = np.asarray(codes, np.int64)
        symbols = codes % N_SYMBOLS
        rest = codes // N_SYMBOLS
        first = rest % 2
        rest = rest // 2
        members = np.stack([(rest // GROUP**k) % GROUP for k in range(length)], axis=1)
        groups = graph_groups(self.config.variant, split, first, length)
        return (groups * GROUP + members).reshape(len(codes), length), symbols

    def apply(self, functions: np.ndarray, symbols: np.ndarray) -> np.ndarray:
        """Results: functions[:, 0] is applied first (it is written next to the symbol)."""
        value = np.asarray(symbols).copy()
        for k in range(functions.shape[1]):
            value = self.tables[functions[:, k], value]
        return value

    # ------------------------------------------------------------------ tokens
    def token_ids(self, functions: torch.Tensor, symbols: torch.Tensor) -> torch.Tensor:
        """``<B> f_L ... f_1 s <E>`` (right to left) as token ids, one row per sequence."""
        names = self.function_ids[functions].flip(1)
        body = torch.cat([names, self.symbol_ids[symbols][:, None]], 1)
        if not self.config.boundary_tokens:
            return body
        begin, end = (torch.full((len(body), 1), i) for i in self.boundary_ids)
        return torch.cat([begin, body, end], 1)

    def encode(self, parts) -> ClassificationSplit:
        extra = 1 + 2 * self.config.boundary_tokens
        width = max(f.shape[1] for f, _ in parts) + extra
        rows, lengths, labels, sizes = [], [], [], []
        for functions, symbols in parts:
            ids = self.token_ids(torch.from_numpy(functions), torch.from_numpy(symbols))
            rows.append(torch.nn.functional.pad(ids, (0, width - ids.shape[1])))
            lengths.append(torch.full((len(ids),), ids.shape[1]))
            labels.append(self.symbol_ids[torch.from_numpy(self.apply(functions, symbols))])
            sizes.append(torch.full((len(ids),), functions.shape[1]))
        return ClassificationSplit(torch.cat(rows), torch.cat(lengths), torch.cat(labels),
                                   {"length": torch.cat(sizes)})

    # ------------------------------------------------------------------ training batches
    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        one_length = self.config.batch_lengths == "one"
        if self.config.lengths == "thesis":
            if one_length:
                return self.length_bucketed_batch(batch_size, generator)
            return super().train_batch(batch_size, generator)
        return self.fresh_batch(batch_size, generator, one_length)

    def fresh_batch(self, batch_size: int, generator: torch.Generator,
                    one_length: bool = False) -> Batch:
        """Lengths uniform over :meth:`train_lengths` (``one_length``: one draw for the whole
        batch); each example a fresh sequence of the training graph not in the IID test."""
        choices = torch.tensor(self.train_lengths())
        draws = torch.randint(len(choices), (1 if one_length else batch_size,),
                              generator=generator)
        lengths = choices[draws].expand(batch_size)
        parts, order = [], []
        for length in torch.unique(lengths).tolist():
            rows = torch.nonzero(lengths == length).flatten()
            parts.append(self.draw(length, len(rows), generator))
            order.append(rows)
        split = self.encode(parts)
        inverse = torch.empty(batch_size, dtype=torch.long)
        inverse[torch.cat(order)] = torch.arange(batch_size)
        return split.subset(inverse).batch()

    def draw(self, length: int, n: int, generator: torch.Generator
             ) -> tuple[np.ndarray, np.ndarray]:
        """n uniform sequences of the training graph outside the IID test."""
        held = self.held_out.get(length, np.zeros(0, np.int64))
        if self.config.variant == "S":
            rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
            while True:
                functions, symbols = self.train_graph.sample(rng, length, n)
                codes = sequence_codes(functions, symbols, N_FUNCTIONS, N_SYMBOLS)
                keep = ~np.isin(codes, held)
                if keep.all():
                    return functions, symbols
                more = self.draw(length, int((~keep).sum()), generator)
                return (np.concatenate([functions[keep], more[0]]),
                        np.concatenate([symbols[keep], more[1]]))
        population = self.population(length)
        codes = _torch_ints(population, n, generator)
        while True:
            functions, symbols = self.decode("train", length, codes)
            bad = np.isin(sequence_codes(functions, symbols, N_FUNCTIONS, N_SYMBOLS), held)
            if not bad.any():
                return functions, symbols
            codes[bad] = _torch_ints(population, int(bad.sum()), generator)


def _torch_ints(high: int, n: int, generator: torch.Generator) -> np.ndarray:
    """n uniform integers in [0, high) from a torch generator (high may exceed 2^31)."""
    return (torch.rand(n, generator=generator, dtype=torch.float64) * high).long().clamp_(
        max=high - 1).numpy()


def _distinct_ints(rng: np.random.Generator, high: int, n: int,
                   exclude: np.ndarray | None = None) -> np.ndarray:
    """n distinct integers in [0, high) outside the sorted ``exclude``, in random order."""
    exclude = np.zeros(0, np.int64) if exclude is None else exclude
    n = min(n, high - len(exclude))
    if high <= 4 * (n + len(exclude)):
        codes = rng.permutation(high)
        return codes[~np.isin(codes, exclude)][:n]
    codes = np.zeros(0, np.int64)
    while len(codes) < n:
        more = rng.integers(high, size=2 * (n - len(codes)) + 16)
        codes = np.unique(np.concatenate([codes, more[~np.isin(more, exclude)]]))
    return rng.permutation(codes)[:n]


@registry.register("task", "ctlpp", CTLPPConfig,
                   "CTL++ systematicity splits A / R / S (thesis Ch. 6)")
def make_ctlpp(config: CTLPPConfig) -> CTLPPTask:
    return CTLPPTask(config)
