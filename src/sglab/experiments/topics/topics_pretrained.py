"""Topic structure in pretrained BERT-family models on real text (Li, Li & Risteski 2023,
the Wikipedia experiment).

Analysis only, nothing is trained: LDA on Wikipedia passages gives topics; per topic
the words of highest P(word | topic) (the top f of the vocabulary) that the tokenizer
keeps whole; then, for a pretrained encoder and random-init copies of it, the ratio of
same-topic to different-topic averages of embedding cosine similarity, embedding dot
product and attention weight, with topic overlap forbidden (``none``) and allowed.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

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
from sglab.experiments.legacy_claims import abs_at_most, claim, greater_than, less_than, not_measurable
from sglab.experiments.runs import Arm, RunSet
from sglab.experiments.topics.topics_pretrained_settings import (
    MODES,
    PretrainedSettings,
    apply_settings,
    comparison_tables,
)
from sglab.report.plots import annotated_heatmap, heatmap_grid, word_lists

LARGE_VOCABULARY = 50_000  # below it, f = 0.0005 keeps a handful of words per topic


def _preset(corpus: dict, model: dict, n_topics: int, fractions: list[float], random_inits: list[int],
            passages: int | None, random_init_passages: int, quiet: bool) -> dict[str, Any]:
    return {"settings": {
        "corpus": corpus, "model": {**model, "random_inits": random_inits},
        "lda": {"n_topics": n_topics}, "topic_words": {"fractions": fractions},
        "statistics": {"passages": passages, "random_init_passages": random_init_passages},
        "quiet": quiet}}


class TopicsPretrained(Experiment):
    name = "topics-pretrained"
    title = "Topic structure in pretrained BERT-family models on Wikipedia text"
    description = (
        "Li, Li & Risteski (ICML 2023), Wikipedia experiment. LDA (gensim, counts, 6 passes) on "
        "120-token passages; per topic the top int(V*f)+1 words by P(word | topic) kept whole by "
        "the tokenizer; same-topic / different-topic ratios of embedding cosine and dot product "
        "(pairs of distinct words, 200-permutation p-values) and of attention weight (whole-word "
        "pairs in 128-token windows, same-word pairs excluded, pooled over layers and heads, "
        "bootstrap 95% interval over passages), for a pretrained encoder and random-init copies."
    )
    presets = {
        # about a minute: 300 passages, 10 topics, one f, one random init
        "quick": _preset({"name": "wiki-excerpt", "max_passages": 300}, {"name": "minilm-l6"}, 10,
                         [0.002], [0], None, 150, True),
        # the whole gensim excerpt (3,813 passages); about 8 minutes on one thread
        "default": _preset({"name": "wiki-excerpt"}, {"name": "minilm-l6"}, 20,
                           [0.0005, 0.001, 0.002, 0.005], [0, 1, 2], None, 500, False),
        # the seed's sizes: set corpus.path (a Wikipedia dump) and model.path (BERT;
        # model.others.NAME=PATH for ALBERT, BART, ELECTRA, RoBERTa)
        "paper": _preset({}, {}, 100, [0.0005, 0.001, 0.002], [0, 1, 2], 5000, 1000, False),
    }

    def settings(self, params, overrides):
        if "seeds" in params:
            raise SglabError(f"--seeds has no effect on {self.name!r} (it trains nothing); set the "
                             "random-init controls with --set model.random_inits=[0,1,2]")
        return {**params, "settings": apply_settings(params["settings"], overrides)}, []

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
        return {"claims": self._claims(s, lda, ours, controls), "sections": [section]}

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

    def _claims(self, s, lda, ours, controls):
        fractions = s.topic_words.fractions
        none = [ours["embeddings"][("none", f)]["word_embeddings"] for f in fractions]
        embeddings = claim(
            "embeddings-topic-structured",
            "Pretrained embeddings are topic-structured: with topics not overlapping, same-topic words "
            "have higher embedding cosine similarity and dot product than different-topic words.",
            {"f": fractions, "cosine ratio": [e["cosine"]["ratio"] for e in none],
             "dot ratio": [e["dot"]["ratio"] for e in none],
             "cosine p": [e["cosine"]["p_value"] for e in none],
             "dot p": [e["dot"]["p_value"] for e in none]},
            [greater_than("cosine ratio", 1.0), greater_than("dot ratio", 1.0),
             less_than("cosine p", 0.01), less_than("dot p", 0.01)],
            context="input-embedding rows, overlap none; seed BERT 1.11-1.21 / 1.13-1.19")
        pooled = {f"{key} ({mode})": value for mode in MODES
                  for key, value in (("ratio", ours["pooled"][mode]["ratio"]),
                                     ("CI low", ours["pooled"][mode]["interval"][0]))}
        attention = claim(
            "attention-topic-structured",
            "Attention is topic-structured: same-topic word pairs get more attention than "
            "different-topic pairs, with topic overlap forbidden and allowed.",
            pooled, [greater_than(name, 1.0) for name in pooled],
            context="ratio pooled over f and layers x heads, 95% bootstrap CI over passages; per f: "
                    + ", ".join(f"{m} {f:g}: {ours['attention'][(m, f)]['ratio_rescaled']:.3f} "
                                "[{:.3f}, {:.3f}]".format(*ours["attention"][(m, f)]["interval"])
                                for m in MODES for f in fractions)
                    + "; seed BERT 1.22-1.32 (none), 1.13-1.23 (allowed)")
        large = lda.vocabulary_size >= LARGE_VOCABULARY
        values = {f"cosine ({m})": [ours["embeddings"][(m, f)]["word_embeddings"]["cosine"]["ratio"]
                                    for f in fractions] for m in MODES}
        values.update({f"attention mean over f ({m})": statistics.mean(
            ours["attention"][(m, f)]["ratio_rescaled"] for f in fractions) for m in MODES})
        statement = ("Allowing topic overlap lowers the ratios: cosine at every f and attention "
                     "averaged over f are higher with overlap forbidden.")
        small = f"V = {lda.vocabulary_size:,} < {LARGE_VOCABULARY:,} (few words per topic at small f)"
        overlap = (claim("overlap-lowers-ratios", statement, values,
                         [greater_than("cosine (none)", "cosine (allowed)"),
                          greater_than("attention mean over f (none)", "attention mean over f (allowed)")])
                   if large else not_measurable("overlap-lowers-ratios", statement,
                                                f"{small}; measured " + _shown(values)))
        deviations = {"attention − 1": [], "emb-out cosine − 1": [], "emb-out dot − 1": []}
        for m in controls.values():
            for key in m["attention"]:
                deviations["attention − 1"].append(m["attention"][key]["ratio_rescaled"] - 1)
                out = m["embeddings"][key]["embedding_output"]
                deviations["emb-out cosine − 1"].append(out["cosine"]["ratio"] - 1)
                deviations["emb-out dot − 1"].append(out["dot"]["ratio"] - 1)
        flat = claim(
            "random-init-flat",
            "A randomly initialized BERT shows no topic structure: all ratios are about 1.",
            {k: [max(v, key=abs)] if v else [] for k, v in deviations.items()},
            [abs_at_most(k, 0.01) for k in deviations],
            context=f"largest deviation over {len(controls)} init seed(s), both overlap modes and every f; "
                    "attention rescaled, embedding-module output (raw embedding rows: reported only)")
        statement = "The attention ratio falls as the threshold f grows (every model in the seed)."
        falls = {f"attention ({m})": [ours["attention"][(m, f)]["ratio_rescaled"] for f in fractions]
                 for m in MODES}
        steps = {f"step ({m})": list(np.diff(v)) for m, v in ((m, falls[f"attention ({m})"]) for m in MODES)}
        ratio_falls = (claim("ratio-falls-with-f", statement, {**falls, **steps},
                             [less_than(k, 0.0) for k in steps])
                       if large and len(fractions) > 1 else
                       not_measurable("ratio-falls-with-f", statement,
                                      (small if not large else "one f only") + "; measured " + _shown(falls)))
        return [embeddings, attention, overlap, flat, ratio_falls]


def _off_diagonal(matrix: np.ndarray) -> np.ndarray:
    matrix = np.array(matrix, dtype=float)
    np.fill_diagonal(matrix, 0.0)
    return matrix


def _shown(values: dict[str, Any]) -> str:
    from sglab.experiments.legacy_claims import format_value

    return ", ".join(f"{k} {format_value(v)}" for k, v in values.items())


registry.register_experiment(TopicsPretrained())

__all__ = ["TopicsPretrained"]
