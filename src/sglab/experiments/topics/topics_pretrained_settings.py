"""Settings of the ``topics-pretrained`` experiment, the seed's Wikipedia table and the
report tables that set our measurements beside it.

The experiment trains nothing, so its ``--set`` keys (``corpus.*``, ``model.*``,
``lda.*``, ``topic_words.*``, ``statistics.*``) are not run-config keys: they are applied
to the preset's settings and validated here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sglab.config import StrictModel, apply_overrides, parse_override, validate


def _one_source(section: str, name: Any, path: Any, names: str) -> None:
    if (name is None) == (path is None):
        raise ValueError(f"set exactly one of {section}.name ({names}) and {section}.path "
                         f"(a local path); got {'both' if name is not None else 'neither'}")


class CorpusSettings(StrictModel):
    name: Literal["wiki-excerpt"] | None = Field(None, description="A corpus that ships with gensim.")
    path: str | None = Field(None, description="A .txt directory, blank-line .txt, .jsonl or wiki dump.")
    passage_tokens: int = Field(120, ge=2)
    min_passage_tokens: int = Field(20, ge=1, description="Keep a document's last part from this length.")
    min_article_tokens: int = Field(50, ge=0, description="Wiki dumps: shorter articles are skipped.")
    max_passages: int | None = Field(None, ge=1, description="Passages evenly spread over the corpus.")

    @model_validator(mode="after")
    def _check(self):
        _one_source("corpus", self.name, self.path, "wiki-excerpt")
        return self


class LdaSettings(StrictModel):
    n_topics: int = Field(20, ge=2)
    passes: int = Field(6, ge=1)
    weighting: Literal["counts", "tfidf"] = "counts"
    seed: int = 0
    no_below: int = Field(5, ge=1)
    no_above: float = Field(0.3, gt=0, le=1)
    keep_n: int | None = Field(100_000, ge=1)
    cache: bool = Field(True, description="Keep the fitted topics under <results>/cache.")


class TopicWordSettings(StrictModel):
    fractions: list[float] = Field([0.0005, 0.001, 0.002], min_length=1)
    no_overlap_rule: Literal["drop", "first_topic", "most_probable"] = "drop"
    shown: int = Field(8, ge=1, description="Top words per topic in the figure.")

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, values: list[float]) -> list[float]:
        if any(not 0 < v < 1 for v in values):
            raise ValueError("every fraction f must lie in (0, 1)")
        return sorted(set(values))


class ModelSettings(StrictModel):
    name: Literal["minilm-l6"] | None = None
    path: str | None = None
    random_inits: list[int] = Field([0, 1, 2], description="Seeds of the random-init controls.")
    others: dict[str, str] = Field({}, description="More local models (label: path), reported only.")

    @model_validator(mode="after")
    def _check(self):
        _one_source("model", self.name, self.path, "minilm-l6")
        return self


class StatisticsSettings(StrictModel):
    permutations: int = Field(200, ge=0)
    window: int = Field(128, ge=8, description="Model tokens per passage, special tokens included.")
    reference_length: int = Field(128, ge=1)
    passages: int | None = Field(None, ge=1, description="Attention passages, trained model (all: null).")
    random_init_passages: int = Field(500, ge=1)
    resamples: int = Field(1000, ge=10)
    batch_size: int = Field(16, ge=1)
    seed: int = 0


class PretrainedSettings(StrictModel):
    corpus: CorpusSettings
    lda: LdaSettings = LdaSettings()
    topic_words: TopicWordSettings = TopicWordSettings()
    model: ModelSettings
    statistics: StatisticsSettings = StatisticsSettings()
    quiet: bool = False


class PresetCorpus(CorpusSettings):
    """A preset's corpus section: its source may be left to ``--set`` (the paper preset)."""

    @model_validator(mode="after")
    def _check(self):
        return self


class PresetModel(ModelSettings):
    """A preset's model section: its source may be left to ``--set`` (the paper preset)."""

    @model_validator(mode="after")
    def _check(self):
        return self


class PresetSettings(PretrainedSettings):
    """The settings as a preset gives them; :func:`apply_settings` checks them in full
    once the ``--set`` changes are applied."""

    corpus: PresetCorpus
    model: PresetModel


def apply_settings(preset: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The preset's settings with ``--set`` applied and validated. Setting ``corpus.path``
    (``model.path``) replaces the preset's ``corpus.name`` (``model.name``) and back."""
    data = dict(preset)
    keys = {".".join(parse_override(text)[0]) for text in overrides}
    for section in ("corpus", "model"):
        for key, other in (("path", "name"), ("name", "path")):
            if f"{section}.{key}" in keys and f"{section}.{other}" not in keys:
                data[section] = {k: v for k, v in data.get(section, {}).items() if k != other}
    settings = validate(PretrainedSettings, apply_overrides(data, list(overrides)))
    return settings.model_dump()


# The seed's Wikipedia table (pretrained BERT and the random-init BERT): cosine, dot and
# attention same-topic / different-topic ratios per threshold f.
SEED_BERT = {
    "none": {0.0005: (1.21, 1.19, 1.32), 0.001: (1.13, 1.15, 1.28), 0.002: (1.11, 1.13, 1.22)},
    "allowed": {0.0005: (1.14, 1.04, 1.23), 0.001: (0.97, 1.05, 1.17), 0.002: (0.99, 0.93, 1.13)},
}
SEED_RANDOM_BERT = {
    "none": {0.0005: (1.00080, 1.00063, 0.99943), 0.001: (0.99974, 1.00036, 0.99996),
             0.002: (1.00016, 1.00027, 1.00007)},
    "allowed": {0.0005: (0.99814, 0.99957, 1.00009), 0.001: (0.99820, 1.00167, 1.00013),
                0.002: (0.99964, 0.99928, 0.99978)},
}


MODES = ("none", "allowed")


def comparison_tables(label: str, measured: dict, controls: dict, word_sets: dict,
                      fractions: list[float]) -> list[dict[str, Any]]:
    """Report tables: the trained model (``measured[label]``) beside the seed's BERT, the
    random-init controls beside the seed's, attention pooled over f, and other models."""
    ours = measured[label]
    rows, control_rows = [], []
    for mode in MODES:
        for f in fractions:
            e, a = ours["embeddings"][(mode, f)], ours["attention"][(mode, f)]
            ws, seed = word_sets[(mode, f)], SEED_BERT[mode].get(f, ("-",) * 3)
            rows.append([mode, f, *seed, e["word_embeddings"]["cosine"]["ratio"],
                         e["word_embeddings"]["dot"]["ratio"], a["ratio_rescaled"],
                         f"[{a['interval'][0]:.3f}, {a['interval'][1]:.3f}]",
                         e["word_embeddings"]["cosine"]["p_value"],
                         e["word_embeddings"]["dot"]["p_value"],
                         e["embedding_output"]["cosine"]["ratio"], e["embedding_output"]["dot"]["ratio"],
                         a["ratio"], len(ws.words), ws.dropped_overlap, ws.dropped_split, a["pairs"][1]])
            for name, m in controls.items():
                e, a = m["embeddings"][(mode, f)], m["attention"][(mode, f)]
                control_rows.append([name, mode, f, *SEED_RANDOM_BERT[mode].get(f, ("-",) * 3),
                                     e["embedding_output"]["cosine"]["ratio"],
                                     e["embedding_output"]["dot"]["ratio"], a["ratio_rescaled"],
                                     a["ratio"], e["word_embeddings"]["cosine"]["ratio"],
                                     e["word_embeddings"]["dot"]["ratio"]])
    others = [[name, mode, f, m["embeddings"][(mode, f)]["word_embeddings"]["cosine"]["ratio"],
               m["embeddings"][(mode, f)]["word_embeddings"]["dot"]["ratio"],
               m["attention"][(mode, f)]["ratio_rescaled"]]
              for name, m in measured.items() if name != label for mode in MODES for f in fractions]
    tables = [
        {"title": f"{label} (ours, 'ours' columns) beside the seed's pretrained BERT",
         "columns": ["overlap", "f", "seed cos", "seed dot", "seed attn", "ours cos", "ours dot",
                     "ours attn (rescaled)", "attn 95% CI", "p cos", "p dot", "emb-out cos",
                     "emb-out dot", "attn (not rescaled)", "words", "dropped: overlap",
                     "dropped: split", "same-topic pairs"], "rows": rows},
        {"title": "Random-init controls beside the seed's random-init BERT",
         "columns": ["model", "overlap", "f", "seed cos", "seed dot", "seed attn", "emb-out cos",
                     "emb-out dot", "attn (rescaled)", "attn (not rescaled)", "raw-row cos",
                     "raw-row dot"], "rows": control_rows},
        {"title": "Attention pooled over f (rescaled)",
         "columns": ["model", "overlap", "ratio", "95% CI"],
         "rows": [[name, mode, m["pooled"][mode]["ratio"],
                   "[{:.3f}, {:.3f}]".format(*m["pooled"][mode]["interval"])]
                  for name, m in {**measured, **controls}.items() for mode in MODES]}]
    if others:
        tables.append({"title": "Other models", "columns": ["model", "overlap", "f", "cos", "dot",
                                                            "attn (rescaled)"], "rows": others})
    return tables
