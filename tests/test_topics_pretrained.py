"""The pretrained-model topic analysis (issue: topic structure on real text): hand-computed
statistics, topic-word selection, LDA, corpus readers, a tiny random BERT end to end, and
the bad inputs that must stop before anything is written."""

import bz2
import json
import math
import sys

import numpy as np
import pytest
import torch

from sglab.analysis.corpus import read_corpus, read_wiki_dump, split_passages
from sglab.analysis.topic_words import fit_lda, select_topic_words, words_per_topic
from sglab.analysis.topics import (
    attention_class_sums,
    attention_ratio,
    attention_statistics,
    cosine_matrix,
    ratio_permutation_test,
    same_topic_mask,
)
from sglab.cli import main
from sglab.sweep.jobs import plan_jobs
from sglab.sweep.local import run_configs

ANIMALS = "cat dog horse cow sheep goat rabbit mouse tiger lion".split()
SPACE = "planet star moon comet orbit galaxy rocket telescope asteroid nebula".split()


# ----------------------------------------------------------------------------- statistics


def hand_built_embeddings():
    """3 topics x 4 words: word i of topic t is s_t (e_t + e_{3+i} + e_15), s = 1, 2, 3."""
    vectors = np.zeros((12, 16))
    for t, scale in enumerate([1.0, 2.0, 3.0]):
        for k in range(4):
            i = 4 * t + k
            vectors[i, [t, 3 + i, 15]] = scale
    return vectors, np.repeat(np.arange(3), 4)


def test_embedding_ratios_match_hand_computed_values():
    vectors, topics = hand_built_embeddings()
    # distinct same-topic words: cosine 2/3, different topics 1/3 -> ratio 2
    cosine = ratio_permutation_test(cosine_matrix(vectors), topics, permutations=200)
    assert cosine["same_topic"] == pytest.approx(2 / 3) and cosine["ratio"] == pytest.approx(2.0)
    # dot: same 2 s_t^2 (mean 28/3), different s_t s_u (mean 11/3) -> 28/11
    dot = ratio_permutation_test(vectors @ vectors.T, topics, permutations=200)
    assert dot["same_topic"] == pytest.approx(28 / 3)
    assert dot["different_topic"] == pytest.approx(11 / 3)
    assert dot["ratio"] == pytest.approx(28 / 11)
    assert cosine["p_value"] == pytest.approx(1 / 201) and dot["p_value"] == pytest.approx(1 / 201)
    membership = np.eye(3, dtype=bool)[topics]  # the same topics as sets
    assert ratio_permutation_test(vectors @ vectors.T, membership, 0)["ratio"] == pytest.approx(28 / 11)


def test_overlap_modes_on_a_table_with_a_shared_word():
    words = ["w0", "w1", "w2", "w3"]
    topic_word = np.array([[0.40, 0.35, 0.20, 0.05],    # top 2: w0, w1
                           [0.05, 0.45, 0.30, 0.20]])   # top 2: w1, w2 (w1 is shared)
    assert words_per_topic(4, 0.3) == 2
    none = select_topic_words(topic_word, words, 0.3, "none")
    assert none.words == ["w0", "w2"] and none.dropped_overlap == 1
    assert none.membership.tolist() == [[True, False], [False, True]]
    first = select_topic_words(topic_word, words, 0.3, "first_topic")
    assert dict(zip(first.words, first.labels())) == {"w0": 0, "w1": 0, "w2": 1}
    probable = select_topic_words(topic_word, words, 0.3, "most_probable")
    assert dict(zip(probable.words, probable.labels())) == {"w0": 0, "w1": 1, "w2": 1}
    allowed = select_topic_words(topic_word, words, 0.3, "allowed")
    index = {w: i for i, w in enumerate(allowed.words)}
    same = same_topic_mask(allowed.membership)
    assert same[index["w0"], index["w1"]] and same[index["w1"], index["w2"]]  # share a topic
    assert not same[index["w0"], index["w2"]]                                 # share none


def test_words_per_topic_is_int_v_f_plus_one():
    rng = np.random.default_rng(0)
    topic_word = rng.dirichlet(np.ones(7876), size=3)
    for f, k in [(0.0005, 4), (0.001, 8), (0.002, 16)]:
        chosen = select_topic_words(topic_word, [f"w{i}" for i in range(7876)], f, "allowed")
        assert chosen.per_topic == k == words_per_topic(7876, f)
        assert chosen.membership.sum(0).tolist() == [k] * 3


def hand_made_attention():
    """Two passages, one head. Items: 0, 1 in topic 0, 2 in topic 1, 3 = no topic word.
    Passage A: items [0, 1, 2, 3], 4 real keys; passage B: items [0, 2, 3, pad], 3 real keys."""
    patterns = torch.zeros(2, 1, 4, 4)
    a, b = patterns[0, 0], patterns[1, 0]
    a[0, 1], a[1, 0] = 0.4, 0.2                                      # same topic, other word
    a[0, 2], a[2, 0], a[1, 2], a[2, 1] = 0.1, 0.3, 0.2, 0.2          # different topics
    a[0, 0], a[0, 3], a[3, 0] = 0.5, 0.9, 0.9                        # same word / no topic word
    b[0, 1], b[1, 0] = 0.5, 0.1                                      # different topics
    b[0, 2] = 0.7                                                    # no topic word
    items = torch.tensor([[0, 1, 2, 3], [0, 2, 3, 3]])
    key_mask = torch.tensor([[True] * 4, [True, True, True, False]])
    return patterns, items, torch.tensor([0, 0, 1, -1]), key_mask


def test_attention_ratio_of_a_hand_made_tensor_with_and_without_rescaling():
    patterns, items, topic_of, key_mask = hand_made_attention()
    sums, counts, keys = attention_class_sums(patterns, items, topic_of, key_mask)
    assert counts.sum(0).tolist() == [5, 2, 6] and keys.tolist() == [4, 3]
    # same topic (0.4 + 0.2) / 2 = 0.3; different (0.1 + 0.3 + 0.2 + 0.2 + 0.5 + 0.1) / 6
    assert attention_ratio(sums, counts) == pytest.approx(0.3 / (1.4 / 6))  # 9/7
    # rescaled by keys / 4: passage B's weights x 3/4 -> different (0.8 + 0.45) / 6
    scaled = sums * (keys / 4)[:, None, None]
    assert attention_ratio(scaled, counts) == pytest.approx(0.3 / (1.25 / 6))  # 1.44
    stats = attention_statistics(patterns, items, topic_of, key_mask, reference_length=4)
    assert stats["different_topic"][0] == pytest.approx(1.25 / 6)
    # item 1 also in topic 1 (overlap allowed): its pairs with item 2 become same-topic
    membership = torch.tensor([[True, False], [True, True], [False, True], [False, False]])
    sums, counts, _ = attention_class_sums(patterns, items, membership, key_mask)
    assert counts.sum(0).tolist() == [5, 4, 4]
    assert attention_ratio(sums, counts) == pytest.approx(((0.6 + 0.4) / 4) / ((0.4 + 0.6) / 4))


# ----------------------------------------------------------------------------- corpus, LDA


def topic_texts(n: int = 40, length: int = 60, seed: int = 0, mixed: bool = False) -> list[str]:
    """Documents of one topic each (alternating), or ``mixed``: 80% of one topic's words and
    20% of the other's."""
    rng = np.random.default_rng(seed)
    texts = []
    for i in range(n):
        main, other = (ANIMALS, SPACE) if i % 2 == 0 else (SPACE, ANIMALS)
        share = 0.8 if mixed else 1.0
        texts.append(" ".join(rng.choice(main) if rng.random() < share else rng.choice(other)
                              for _ in range(length)))
    return texts


def test_lda_recovers_a_two_topic_corpus_and_caches_it(tmp_path):
    passages = [text.split() for text in topic_texts()]
    model = fit_lda(passages, 2, passes=10, no_below=1, no_above=0.9, cache_dir=tmp_path)
    assert not model.cached and model.vocabulary_size == 20
    for row in model.topic_word:
        top = {model.words[i] for i in np.argsort(-row)[:10]}
        assert top in (set(ANIMALS), set(SPACE))
    again = fit_lda(passages, 2, passes=10, no_below=1, no_above=0.9, cache_dir=tmp_path)
    assert again.cached and np.array_equal(again.topic_word, model.topic_word)


def test_passages_of_120_tokens_keep_a_last_part_of_at_least_20():
    document = [f"w{i}" for i in range(265)]
    assert [len(p) for p in split_passages([document])] == [120, 120, 25]
    assert [len(p) for p in split_passages([document[:259]])] == [120, 120]


WIKI = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">
{pages}
</mediawiki>"""
PAGE = """<page><title>{title}</title><ns>{ns}</ns><id>{id}</id>
<revision><id>{id}</id><text xml:space="preserve">{text}</text></revision></page>"""


def test_wiki_reader_drops_redirects_markup_short_articles_and_other_namespaces(tmp_path):
    body = " ".join(["the anarchist movement spread across europe"] * 10)
    pages = [
        ("Anarchism", 0, "'''Anarchism''' is a [[political philosophy|philosophy]] {{Infobox zzzqq}} "
                         + body + " &lt;ref&gt;zzzcitation&lt;/ref&gt;"),
        ("Anarchy", 0, "#REDIRECT [[Anarchism]] " + body),
        ("Stub", 0, "A short article about nothing much."),
        ("Wikipedia:About", 4, body),
    ]
    xml = WIKI.format(pages="\n".join(PAGE.format(title=t, ns=ns, id=i, text=x)
                                      for i, (t, ns, x) in enumerate(pages, 1)))
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(xml.encode()))
    articles = read_wiki_dump(path)
    assert len(articles) == 1
    tokens = articles[0]
    assert tokens[:5] == ["anarchism", "is", "philosophy", "the", "anarchist"]
    assert "political" not in tokens and "zzzqq" not in tokens and "zzzcitation" not in tokens
    corpus = read_corpus(path)
    assert corpus.documents == 1 and corpus.tokens == len(tokens)


def test_text_directory_blank_line_txt_and_jsonl_readers(tmp_path):
    texts = topic_texts(4, 30)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, text in enumerate(texts):
        (folder / f"{i}.txt").write_text(text)
    (tmp_path / "docs.txt").write_text("\n\n".join(texts))
    (tmp_path / "docs.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts))
    for path in (folder, tmp_path / "docs.txt", tmp_path / "docs.jsonl"):
        corpus = read_corpus(path)
        assert corpus.documents == 4 and [" ".join(p) for p in corpus.passages] == texts


# ----------------------------------------------------------------------------- end to end


def test_no_runs_is_a_no_op_for_the_planner_and_runner(tmp_path):
    assert plan_jobs([], tmp_path, min_jobs=2) == []
    assert run_configs([], tmp_path / "runs", workers=2) == []
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random BERT saved with save_pretrained and a two-topic jsonl corpus."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("tiny")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *ANIMALS, *SPACE]) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(vocab))
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64,
                                 max_position_embeddings=64))
    model.save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in topic_texts(60, 40, mixed=True)))
    return root


def run_cli(tiny, out, *sets):
    args = ["run", "topics-pretrained", "--preset", "quick", "--out", str(out), "--threads", "1",
            "--set", f"corpus.path={tiny / 'corpus.jsonl'}", "--set", f"model.path={tiny / 'bert'}",
            "--set", "lda.n_topics=2", "--set", "lda.no_below=1", "--set", "lda.no_above=0.9",
            "--set", "topic_words.fractions=[0.1]", "--set", "statistics.permutations=20",
            "--set", "statistics.resamples=50", "--set", "statistics.random_init_passages=20"]
    for text in sets:
        args += ["--set", text]
    return main(args)


def test_tiny_random_bert_via_model_path_end_to_end(tiny, tmp_path):
    assert run_cli(tiny, tmp_path / "out") == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["runs"] == [] and len(results["claims"]) == 5
    claims = {c["id"]: c for c in results["claims"]}
    for claim_id in ("overlap-lowers-ratios", "ratio-falls-with-f"):  # V = 20 < 50k
        assert claims[claim_id]["verdict"] == "NOT MEASURED"
        assert "V = 20 < 50,000" in claims[claim_id]["evidence"]
    for claim_id in ("embeddings-topic-structured", "attention-topic-structured",
                     "random-init-flat"):
        assert claims[claim_id]["verdict"] != "NOT MEASURED"
        assert claims[claim_id]["source"].startswith("003_bed5f1b5e725c57e.txt")
    attention = claims["attention-topic-structured"]
    assert attention["values"]["f"] == [0.1]  # the seed's thresholds are not measured here
    assert attention["references"]["attention ratio (none), f 0.0005"]["within"] is False
    flat = claims["random-init-flat"]["values"]["largest |attention − 1|"]
    assert len(flat["seeds"]) == 1 and flat["mean"] <= 0.02  # one random-init copy
    pooled = {row[0] + "/" + row[1]: row[2] for row in results["sections"][0]["tables"][2]["rows"]}
    assert set(pooled) == {"bert/none", "bert/allowed", "random init 0/none", "random init 0/allowed"}
    for ratio in pooled.values():  # a random BERT: no topic structure in its attention
        assert math.isfinite(ratio) and abs(ratio - 1) <= 0.02
    assert (tmp_path / "out" / "figures" / "head_ratios.png").is_file()
    assert (tmp_path / "cache").is_dir()  # the LDA cache beside the output


def test_attention_sums_on_gathered_topic_positions_equal_the_full_computation(tiny):
    from sglab.analysis.pretrained import (
        attention_sums,
        encode_passages,
        load_pretrained,
        membership_table,
    )

    loaded = load_pretrained(tiny / "bert")
    passages = [t.split() for t in topic_texts(6, 40, seed=1, mixed=True)]
    encoded = encode_passages(loaded.tokenizer, passages, window=32)
    assert encoded.input_ids.shape == (6, 32)  # [CLS] + 30 words + [SEP]: the rest cut off
    topics = {w: 0 for w in ANIMALS[:3]} | {w: 1 for w in SPACE[:3]}
    membership = np.eye(2, dtype=bool)[list(topics.values())]
    tables = [membership_table(encoded, list(topics), membership),
              membership_table(encoded, list(topics), np.ones_like(membership))]
    found = attention_sums(loaded.model, encoded, tables, batch_size=4)
    with torch.no_grad():
        patterns = torch.cat(list(loaded.model(input_ids=encoded.input_ids,
                                               output_attentions=True).attentions), dim=1)
    items = encoded.position_word.clone()
    items[items < 0] = len(encoded.words)
    for t, table in enumerate(tables):
        sums, counts, keys = attention_class_sums(patterns, items, table, encoded.attention_mask)
        assert np.allclose(found["sums"][t], sums) and np.array_equal(found["counts"][t], counts)
        assert counts[:, 1].sum() > 0
    assert found["counts"][1][:, 2].sum() == 0  # every word in both topics: no different pairs
    assert found["layers"] == 2 and found["heads"] == 2 and found["keys"].tolist() == [32] * 6


@pytest.mark.parametrize("case", ["missing model", "not a model", "missing corpus", "empty corpus",
                                  "extra absent", "f too small", "unknown key"])
def test_bad_input_exits_2_and_writes_nothing(tiny, tmp_path, monkeypatch, capsys, case):
    sets = {"missing model": [f"model.path={tmp_path / 'nowhere'}"],
            "not a model": [f"model.path={tmp_path}"],
            "missing corpus": [f"corpus.path={tmp_path / 'none.jsonl'}"],
            "empty corpus": [f"corpus.path={tmp_path / 'empty.jsonl'}"],
            "extra absent": [], "f too small": ["topic_words.fractions=[0.001]"],
            "unknown key": ["lda.n_topcs=3"]}[case]
    (tmp_path / "empty.jsonl").write_text("")
    if case == "extra absent":
        monkeypatch.setitem(sys.modules, "transformers", None)  # import fails
    out = tmp_path / "out"
    assert run_cli(tiny, out, *sets) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and len(error.strip().splitlines()) <= 2
    expected = {"missing model": "not a directory", "not a model": "no config.json",
                "missing corpus": "does not exist", "empty corpus": "no passage",
                "extra absent": "sglab[pretrained]", "f too small": "at least 2 are needed",
                "unknown key": "Did you mean 'lda.n_topics'"}[case]
    assert expected in error
    assert not (out / "results.json").exists()


def test_an_analysis_only_experiment_has_no_train_config_and_no_seeds(tmp_path, capsys):
    assert main(["train", "--preset", "topics-pretrained:quick", "--runs-dir", str(tmp_path)]) == 2
    assert "trains no runs" in capsys.readouterr().err
    out = tmp_path / "out"
    assert main(["run", "topics-pretrained", "--preset", "quick", "--seeds", "2", "--out", str(out)]) == 2
    assert "model.random_inits" in capsys.readouterr().err and not out.exists()
