"""CTL++ variant 'S' (staged, thesis Sec. 6.2, Fig. 6.2): groups, shared symbol sets and
the sampler of training (and OOD) chains.

Five groups: G_o = the first ``shared_functions`` functions, then G_a1, G_a2, G_b1, G_b2
split the rest equally (in this order, as the authors' code assigns them). A training
sequence chains pairs: for each pair a path p in {a, b} is drawn, then f_i from G_p1 and
f_{i+1} from G_p2 ∪ G_o, where f in G_o may follow G_a1 only if the symbol it receives is
in S_a^f (after G_b1: in S_b^f). The OOD test chains pairs f_i in G_p1, f_{i+1} in the
other path's G_q2 (q != p), which training never shows. Sequences therefore hold 2, 4,
6, ... functions (thesis: "length 2K + 1" counting the symbol; no single applications).

Sampling follows the authors' code: the input symbol is uniform, and every next function
is uniform over the functions the rule allows at that point (so sequences are not uniform
over the training graph, whose allowed sets depend on the symbol).
"""

from __future__ import annotations

import math

import numpy as np

from sglab.errors import SglabError
from sglab.tasks.ctl import sequence_codes

PATHS = ("a", "b")


def staged_groups(n_functions: int, shared_functions: int) -> dict[str, np.ndarray]:
    """{"o", "a1", "a2", "b1", "b2"} -> function indices (thesis Sec. 6.2; G_o first)."""
    rest = n_functions - shared_functions
    if shared_functions < 0 or rest < 4 or rest % 4:
        raise SglabError(f"variant 'S' splits the {n_functions} - shared_functions = {rest} "
                         f"functions outside G_o into 4 equal groups; choose shared_functions "
                         f"so that this is a positive multiple of 4 (e.g. 4, 8, 12, 16)")
    size = rest // 4
    groups = {"o": np.arange(shared_functions)}
    for k, name in enumerate(("a1", "a2", "b1", "b2")):
        groups[name] = shared_functions + k * size + np.arange(size)
    return groups


def shared_symbol_sets(shared_functions: int, shared_symbols: int, n_symbols: int,
                       rng: np.random.Generator) -> tuple[list[set], list[set]]:
    """(S_a^f, S_b^f) for each f in G_o (thesis Sec. 6.2, Fig. 6.4 x-axis).

    |S_a^f ∩ S_b^f| = ``shared_symbols``; the other symbols are split between the two
    sets (S_a gets the larger half; a single leftover goes to a random path). The shared
    windows are consecutive blocks of ``shared_symbols`` symbols, one per function, moving
    on from one function to the next, so the first ceil(n_symbols / shared_symbols)
    functions cover every symbol ("the union of shared symbols ... covers all possible
    symbols"); after each full pass the symbols are renamed by a random permutation (as
    in the authors' code) so later functions share other combinations.
    """
    if not 0 <= shared_symbols <= n_symbols:
        raise SglabError(f"shared_symbols must be within 0..{n_symbols}, got {shared_symbols}")
    if shared_symbols and shared_functions * shared_symbols < n_symbols:
        raise SglabError(
            f"the shared symbols of the {shared_functions} functions of G_o cannot cover all "
            f"{n_symbols} symbols (thesis Sec. 6.2) with {shared_symbols} each; use "
            f"shared_functions >= {math.ceil(n_symbols / shared_symbols)} or more shared symbols")
    sets_a, sets_b = [], []
    rename = list(range(n_symbols))
    per_pass = math.ceil(n_symbols / shared_symbols) if shared_symbols else 1
    for k in range(shared_functions):
        window = range(k * shared_symbols, (k + 1) * shared_symbols)
        shared = {rename[i % n_symbols] for i in window}
        others = [s for s in range(n_symbols) if s not in shared]
        if len(others) == 1:
            half = int(rng.integers(2))  # 0: the leftover goes to b, 1: to a
        else:
            half = math.ceil(len(others) / 2)
        sets_a.append(shared | set(others[:half]))
        sets_b.append(shared | set(others[half:]))
        if shared_symbols and k % per_pass == per_pass - 1:
            rename = rng.permutation(n_symbols).tolist()
    return sets_a, sets_b


class StagedGraph:
    """Which second function may follow which first one: ``allowed[path, symbol, f]`` is
    True when f may follow a G_p1 function that output ``symbol``."""

    def __init__(self, tables: np.ndarray, groups: dict[str, np.ndarray],
                 allowed: np.ndarray):
        self.tables, self.groups, self.allowed = tables, groups, allowed
        self.first = np.stack([groups["a1"], groups["b1"]])  # [path, members]
        self._counts: dict[int, int] = {}

    @classmethod
    def training(cls, tables, groups, sets_a, sets_b) -> StagedGraph:
        """f_{i+1} in G_p2, or f in G_o with the received symbol in S_p^f."""
        n_functions, n_symbols = tables.shape
        allowed = np.zeros((2, n_symbols, n_functions), bool)
        for p, (path, sets) in enumerate(zip(PATHS, (sets_a, sets_b))):
            allowed[p, :, groups[f"{path}2"]] = True
            for f, symbols in zip(groups["o"], sets):
                allowed[p, sorted(symbols), f] = True
        return cls(tables, groups, allowed)

    @classmethod
    def crossed(cls, tables, groups) -> StagedGraph:
        """The OOD test: f_{i+1} from the other path's stage 2 (never after G_p1 in training)."""
        n_functions, n_symbols = tables.shape
        allowed = np.zeros((2, n_symbols, n_functions), bool)
        allowed[0, :, groups["b2"]] = True
        allowed[1, :, groups["a2"]] = True
        return cls(tables, groups, allowed)

    def sample(self, rng: np.random.Generator, length: int, n: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """n sequences of ``length`` (even) functions in application order, and their
        input symbols; each step uniform over what the rule allows."""
        n_symbols = self.tables.shape[1]
        symbols = rng.integers(n_symbols, size=n)
        value = symbols.copy()
        functions = np.zeros((n, length), np.int64)
        for i in range(0, length, 2):
            path = rng.integers(2, size=n)
            first = self.first[path, rng.integers(self.first.shape[1], size=n)]
            value = self.tables[first, value]
            # uniform over the allowed second functions: largest random key among them
            keys = np.where(self.allowed[path, value], rng.random(
                (n, self.tables.shape[0])), -1.0)
            second = keys.argmax(1)
            functions[:, i], functions[:, i + 1] = first, second
            value = self.tables[second, value]
        return functions, symbols

    def sample_distinct(self, rng: np.random.Generator, length: int, n: int,
                        exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """n distinct sequences (at most all there are) outside the sorted codes
        ``exclude``, drawn by :meth:`sample` with duplicates rejected, in draw order."""
        n_functions, n_symbols = self.tables.shape
        exclude = np.zeros(0, np.int64) if exclude is None else exclude
        n = min(n, self.count(length) - len(exclude))
        if length == 2 and 2 * n >= self.count(2):  # most pairs: a random order of them all
            functions, symbols = self.all_pairs()
            keep = ~np.isin(sequence_codes(functions, symbols, n_functions, n_symbols), exclude)
            order = rng.permutation(int(keep.sum()))[:n]
            return functions[keep][order], symbols[keep][order]
        functions = np.zeros((0, length), np.int64)
        symbols = np.zeros(0, np.int64)
        codes = np.zeros(0, np.int64)
        while len(codes) < n:
            f, s = self.sample(rng, length, 2 * (n - len(codes)) + 16)
            new = sequence_codes(f, s, n_functions, n_symbols)
            f, s, new = f[~np.isin(new, exclude)], s[~np.isin(new, exclude)], \
                new[~np.isin(new, exclude)]
            functions, symbols = np.concatenate([functions, f]), np.concatenate([symbols, s])
            codes = np.concatenate([codes, new])
            _, first = np.unique(codes, return_index=True)
            keep = np.sort(first)  # first occurrences, in draw order
            functions, symbols, codes = functions[keep], symbols[keep], codes[keep]
        return functions[:n], symbols[:n]

    def count(self, length: int) -> int:
        """Distinct sequences of ``length`` functions (and an input symbol): one pair is
        a transition matrix over symbols, M[s, s''] = #(f1, f2) taking s to s''."""
        if length not in self._counts:
            self._counts[length] = self._count(length)
        return self._counts[length]

    def _count(self, length: int) -> int:
        n_symbols = self.tables.shape[1]
        pair = np.zeros((n_symbols, n_symbols), np.int64)
        for p in range(2):
            for f1 in self.first[p]:
                for s in range(n_symbols):
                    middle = self.tables[f1, s]
                    for f2 in np.flatnonzero(self.allowed[p, middle]):
                        pair[s, self.tables[f2, middle]] += 1
        ways = np.ones(n_symbols, dtype=object)  # Python ints: no overflow
        for _ in range(length // 2):
            ways = ways @ pair.astype(object)
        return int(ways.sum())

    def all_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every sequence of two functions (and its input symbol) of this graph."""
        functions, symbols = [], []
        for p in range(2):
            for f1 in self.first[p]:
                for s in range(self.tables.shape[1]):
                    for f2 in np.flatnonzero(self.allowed[p, self.tables[f1, s]]):
                        functions.append((f1, f2))
                        symbols.append(s)
        return np.asarray(functions, np.int64).reshape(-1, 2), np.asarray(symbols, np.int64)
