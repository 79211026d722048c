"""Topic structure in pretrained BERT-family models on real text (Li, Li & Risteski 2023,
the Wikipedia experiment).

Analysis only, nothing is trained: LDA on Wikipedia passages gives topics; per topic
the words of highest P(word | topic) (the top f of the vocabulary) that the tokenizer
keeps whole; then, for a pretrained encoder and random-init copies of it, the ratio of
same-topic to different-topic averages of embedding cosine similarity, embedding dot
product and attention weight, with topic overlap forbidden (``none``) and allowed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from sglab import registry
from sglab.analysis.corpus import read_corpus
from sglab.analysis.pretrained import (
    load_pretrained,
    measure_topic_structure,
    model_directory,
    random_init,
    spread,
    whole_word_ids,
)
from sglab.analysis.topic_words import fit_lda, select_topic_words
from sglab.errors import SglabError
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured, format_value, per_seed
from sglab.experiments.runs import Arm, RunSet
from sglab.experiments.spec import ExperimentParams
from sglab.experiments.topics.topics_pretrained_settings import (
    MODES,
    SEED_BERT,
    PresetSettings,
    PretrainedSettings,
    apply_settings,
    comparison_tables,
)
from sglab.report.plots import annotated_heatmap, heatmap_grid, word_lists

LARGE_VOCABULARY = 50_000  # below it, f = 0.0005 keeps a handful of words per topic


class TopicsPretrainedParams(ExperimentParams):
    seeds: list[int] = Field(min_length=1)  # seeds of the random-init controls (nothing trains)
    settings: PresetSettings  # corpus, LDA, topic words, model, statistics (settings module)


class TopicsPretrained(Experiment):
    name = "topics-pretrained"
    params_model = TopicsPretrainedParams

    def preset(self, name: str, seeds: int | None = None,
               changes: list[str] | None = None) -> dict[str, Any]:
        if seeds is not None:
            raise SglabError(f"--seeds has no effect on {self.name!r} (it trains nothing); set the "
                             "random-init controls with --set model.random_inits=[0,1,2]")
        return super().preset(name, changes=changes)

    def settings(self, params, overrides):
        """The preset's seeds are the random-init controls (``model.random_inits``, which
        ``--set`` may change); the settings are checked in full once ``--set`` is applied."""
        preset = {**params["settings"],
                  "model": {**params["settings"]["model"], "random_inits": params["seeds"]}}
        settings = apply_settings(preset, overrides)
        return {**params, "seeds": settings["model"]["random_inits"], "settings": settings}, []

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        return []  # analysis only: nothing to train

    # ------------------------------------------------------------------ analysis
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        s = PretrainedSettings.model_validate(params["settings"])
        say = (lambda line: None) if s.quiet else (lambda line: print(line, flush=True))
        model_directory(s.model.path, s.model.name)  # a bad model path fails before any work
        for path in s.model.others.values():
            model_directory(path)
        c = s.corpus
        corpus = read_corpus(c.path, c.name, c.passage_tokens, c.min_passage_tokens,
                             c.min_article_tokens, c.max_passages)
        say(f"corpus {corpus.describe()}")
        lda = fit_lda(corpus.passages, s.lda.n_topics, s.lda.passes, s.lda.weighting, s.lda.seed,
                      s.lda.no_below, s.lda.no_above, s.lda.keep_n,
                      cache_dir=Path(out_dir).resolve().parent / "cache" if s.lda.cache else None)
        say(f"LDA: V {lda.vocabulary_size:,}, {s.lda.n_topics} topics, {lda.seconds:.1f} s"
            + (" (cached)" if lda.cached else ""))
        trained = load_pretrained(s.model.path, s.model.name)
        word_sets = self._word_sets(s, lda, trained.tokenizer)
        st = s.statistics
        options = dict(window=st.window, reference_length=st.reference_length,
                       resamples=st.resamples, batch_size=st.batch_size, seed=st.seed,
                       matrix_key=("none", s.topic_words.fractions[0]), printer=say)
        label = s.model.name or Path(s.model.path).name
        measured = {label: measure_topic_structure(trained, word_sets, spread(corpus.passages, st.passages),
                                                   permutations=st.permutations, **options)}
        for name, path in s.model.others.items():
            other = load_pretrained(path)
            measured[name] = measure_topic_structure(
                other, self._word_sets(s, lda, other.tokenizer), spread(corpus.passages, st.passages),
                permutations=st.permutations, **options)
        controls = {}
        for seed in s.model.random_inits:
            controls[f"random init {seed}"] = measure_topic_structure(
                random_init(trained, seed), word_sets, spread(corpus.passages, st.random_init_passages),
                permutations=0, **options)
        for name, m in {**measured, **controls}.items():
            say(f"{name}: {m['passages']} passages, {m['seconds']:.0f} s")
        return self._report(s, corpus, lda, trained, word_sets, label, measured, controls, out_dir)

    @staticmethod
    def _word_sets(s: PretrainedSettings, lda, tokenizer) -> dict[tuple[str, float], Any]:
        rule = {"drop": "none"}.get(s.topic_words.no_overlap_rule, s.topic_words.no_overlap_rule)
        sets = {}
        for mode in MODES:
            for f in s.topic_words.fractions:
                chosen = select_topic_words(lda.topic_word, lda.words, f,
                                            rule if mode == "none" else "allowed")
                chosen = chosen.subset([i is not None for i in whole_word_ids(tokenizer, chosen.words)])
                if chosen.topics_with_pairs() < 2:
                    raise SglabError(
                        f"topic_words.fractions: f = {f:g} ({mode} overlap) leaves "
                        f"{chosen.topics_with_pairs()} topic(s) with 2 or more whole words "
                        f"({chosen.per_topic} per topic before filtering); at least 2 are needed: "
                        "use a larger f, or a corpus with a larger vocabulary")
                sets[(mode, f)] = chosen
        return sets

    def _report(self, s, corpus, lda, trained, word_sets, label, measured, controls, out_dir):
        fractions = s.topic_words.fractions
        ours = measured[label]
        described = trained.describe()
        note = ("a sentence-embedding fine-tune (sentence-transformers), not an MLM checkpoint"
                if described["sentence_embedding_fine_tune"] else "a pretrained checkpoint")
        tables = comparison_tables(label, measured, controls, word_sets, fractions)
        section = {
            "title": "Wikipedia topic structure",
            "text": f"Corpus: {corpus.describe()}. LDA: V = {lda.vocabulary_size:,}, "
                    f"{s.lda.n_topics} topics, {s.lda.weighting}, {s.lda.passes} passes "
                    f"({lda.seconds:.1f} s{', cached' if lda.cached else ''}). Model {label}: "
                    f"{described}; {note}. Embedding ratios: 'cos'/'dot' use the rows of the input "
                    "embedding table (the authors' choice), 'emb-out' the embedding module's output "
                    "for the word alone. Attention rescaled by keys/"
                    f"{s.statistics.reference_length}; trained model on {ours['passages']} passages, "
                    f"random inits on {next(iter(controls.values()))['passages'] if controls else 0}.",
            "tables": tables, "figures": self._figures(s, lda, word_sets, label, ours, controls, out_dir)}
        return {"measured": measurements(s.topic_words.fractions, lda.vocabulary_size, ours,
                                         controls), "sections": [section]}

    def _figures(self, s, lda, word_sets, label, ours, controls, out_dir):
        f = s.topic_words.fractions[0]
        top = np.argsort(-lda.topic_word, axis=1)[:, :s.topic_words.shown]
        words = word_lists(out_dir, "topic_words",
                           [(f"topic {t}", [lda.words[i] for i in row]) for t, row in enumerate(top)],
                           title="top words per topic", caption="LDA topics: words by P(word | topic).")
        cells = [(f"{label}, f={f:g}", _off_diagonal(ours["cosine"]))] + [
            (name, _off_diagonal(m["cosine"])) for name, m in list(controls.items())[:1]]
        count = len(word_sets[("none", f)].words)
        matrices = heatmap_grid(out_dir, "cosine_matrices", [cells], cmap="RdBu_r", symmetric=True,
                                title="word-embedding cosine, topic-ordered",
                                caption=f"Input-embedding cosine similarity of the {count} topic words "
                                        "(no overlap), ordered by topic: trained vs random init.")
        maps = [np.log2(ours["head_map"][mode]) for mode in MODES]
        limit = float(np.nanmax(np.abs(maps))) or 1.0
        heads = annotated_heatmap(out_dir, "head_ratios", [(f"overlap {m}", x) for m, x in zip(MODES, maps)],
                                  xticklabels=list(range(maps[0].shape[1])),
                                  yticklabels=list(range(maps[0].shape[0])), xlabel="head", ylabel="layer",
                                  title="attention ratio per layer and head", fmt="{:.1f}",
                                  vmin=-limit, vmax=limit, cmap="RdBu_r", colorbar_label="log2 ratio",
                                  caption="log2 of the same-topic / different-topic attention ratio "
                                          "(rescaled) per layer and head, pooled over f (0: no structure).")
        return [words, matrices, heads]


def _off_diagonal(matrix: np.ndarray) -> np.ndarray:
    matrix = np.array(matrix, dtype=float)
    np.fill_diagonal(matrix, 0.0)
    return matrix


def _at(by_f: dict[float, float], f: float) -> float:
    """The value at threshold ``f``; nan where the preset does not measure that f."""
    return by_f.get(f, math.nan)


def _seed_thresholds() -> list[float]:
    return sorted(SEED_BERT["none"])


def measurements(fractions: list[float], vocabulary_size: int, ours: dict[str, Any],
                 controls: dict[str, dict[str, Any]]) -> dict[str, Measured | NotMeasured]:
    """The claims' values: per f (lists over the preset's thresholds, for the rules) and at
    each of the seed's thresholds (for its numbers; nan where the preset lacks that f)."""
    seed_f = _seed_thresholds()

    def embedding(mode, f, kind, key="word_embeddings"):
        return ours["embeddings"][(mode, f)][key][kind]

    ratio = {(mode, kind): {f: embedding(mode, f, kind)["ratio"] for f in fractions}
             for mode in MODES for kind in ("cosine", "dot")}
    attention = {mode: {f: ours["attention"][(mode, f)]["ratio_rescaled"] for f in fractions}
                 for mode in MODES}
    at_seed_f = f"n/a at the seed's f not in this preset ({', '.join(f'{f:g}' for f in seed_f)})"
    measured: dict[str, Measured | NotMeasured] = {}
    measured["embeddings-topic-structured"] = Measured(
        {"f": list(fractions),
         "cosine ratio": list(ratio[("none", "cosine")].values()),
         "dot ratio": list(ratio[("none", "dot")].values()),
         "cosine p": [embedding("none", f, "cosine")["p_value"] for f in fractions],
         "dot p": [embedding("none", f, "dot")["p_value"] for f in fractions],
         **{f"{kind} ratio, f {f:g}": _at(ratio[("none", kind)], f)
            for kind in ("cosine", "dot") for f in seed_f}},
        "same-topic / different-topic means over pairs of distinct topic words, input-embedding "
        "rows, topic overlap forbidden, one entry per f; p: 200-permutation test; " + at_seed_f)
    pooled = {f"pooled {key} ({mode})": value for mode in MODES
              for key, value in (("ratio", ours["pooled"][mode]["ratio"]),
                                 ("CI low", ours["pooled"][mode]["interval"][0]))}
    measured["attention-topic-structured"] = Measured(
        {"f": list(fractions),
         **{f"attention ratio ({mode})": list(attention[mode].values()) for mode in MODES},
         **pooled,
         **{f"attention ratio ({mode}), f {f:g}": _at(attention[mode], f)
            for mode in MODES for f in seed_f}},
        "same-topic / different-topic attention (rescaled by keys / reference length, pooled "
        "over layers and heads), one entry per f; pooled: over f, with a 95% bootstrap "
        "interval over passages; " + at_seed_f)
    large = vocabulary_size >= LARGE_VOCABULARY
    overlap = {f"{kind} ratio ({mode})": list(ratio[(mode, kind)].values())
               for kind in ("cosine", "dot") for mode in MODES}
    overlap.update({f"attention ratio ({mode})": list(attention[mode].values())
                    for mode in MODES})
    small = (f"V = {vocabulary_size:,} < {LARGE_VOCABULARY:,} (few words per topic at small f)")
    measured["overlap-lowers-ratios"] = (
        Measured({"f": list(fractions), **overlap,
                  **{f"{kind} ratio (allowed), f {f:g}": _at(ratio[("allowed", kind)], f)
                     for kind in ("cosine", "dot") for f in seed_f}},
                 "ratios with topic overlap forbidden (none) and allowed, one entry per f; "
                 + at_seed_f)
        if large else NotMeasured(f"{small}; measured " + _shown({"f": fractions, **overlap})))
    measured["random-init-flat"] = _random_init_measurement(fractions, controls)
    falls = {f"attention ratio ({mode})": list(attention[mode].values()) for mode in MODES}
    steps = {f"step ({mode})": list(np.diff(values)) for mode, values in
             zip(MODES, falls.values())}
    measured["ratio-falls-with-f"] = (
        Measured({"f": list(fractions), **falls, **steps},
                 "attention ratio (rescaled) per f and its change from one f to the next")
        if large and len(fractions) > 1 else
        NotMeasured((small if not large else "one f only") + "; measured "
                    + _shown({"f": fractions, **falls})))
    return measured


def _random_init_measurement(fractions: list[float], controls: dict[str, dict[str, Any]]
                             ) -> Measured | NotMeasured:
    """Per random-init copy: the largest deviation from 1 of each ratio over both overlap
    modes and every f, and its ratios at the seed's thresholds."""
    if not controls:
        return NotMeasured("no random-init controls (settings.model.random_inits is empty)")
    seed_f = _seed_thresholds()

    def ratios(m, mode, f) -> dict[str, float]:
        out = m["embeddings"][(mode, f)]["embedding_output"]
        return {"cosine": out["cosine"]["ratio"], "dot": out["dot"]["ratio"],
                "attention": m["attention"][(mode, f)]["ratio_rescaled"]}

    names = {"cosine": "emb-out cosine", "dot": "emb-out dot", "attention": "attention"}
    values: dict[str, Any] = {
        f"largest |{name} − 1|": per_seed(
            max(abs(ratios(m, mode, f)[kind] - 1) for mode in MODES for f in fractions)
            for m in controls.values())
        for kind, name in names.items()}
    for mode in MODES:
        for f in seed_f:
            for kind, name in names.items():
                values[f"{name} ({mode}), f {f:g}"] = per_seed(
                    ratios(m, mode, f)[kind] if f in fractions else math.nan
                    for m in controls.values())
    return Measured(values, f"{len(controls)} random-init copies (one value each); attention "
                            "rescaled, embeddings: the embedding module's output for the word "
                            "(raw embedding rows: reported only); n/a at the seed's f not in "
                            "this preset")


def _shown(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {format_value(v)}" for k, v in values.items())


registry.register_experiment(TopicsPretrained())

__all__ = ["TopicsPretrained"]
