"""Speed of the topics-pretrained attention pass (all-MiniLM-L6-v2, one thread).

    python benchmarks/pretrained_attention.py                 # 64 passages, 8 word sets
    python benchmarks/pretrained_attention.py --passages 128

Times, on passages of the gensim Wikipedia excerpt with the default preset's 8 topic-word
sets (overlap none / allowed x f = 0.0005, 0.001, 0.002, 0.005, 20 LDA topics):
the model's forward pass alone, the whole attention pass as the experiment runs it (class
sums on the gathered topic-word positions), and the class sums on the full 128 x 128
patterns, and checks that both give the same sums. Needs the ``pretrained`` extra.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch
from common import parse_with_quick

from sglab.analysis.corpus import read_corpus
from sglab.analysis.pretrained import (
    attention_sums,
    encode_passages,
    load_pretrained,
    membership_table,
    spread,
)
from sglab.analysis.topic_words import fit_lda, select_topic_words
from sglab.analysis.topics import attention_class_sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parse_with_quick(parser, {"passages": 4})
    torch.set_num_threads(args.threads)
    corpus = read_corpus(name="wiki-excerpt")
    with tempfile.TemporaryDirectory() as cache:
        lda = fit_lda(corpus.passages, 20, cache_dir=cache)
    loaded = load_pretrained(name="minilm-l6")
    encoded = encode_passages(loaded.tokenizer, spread(corpus.passages, args.passages))
    tables = []
    for mode in ("none", "allowed"):
        for f in (0.0005, 0.001, 0.002, 0.005):
            words = select_topic_words(lda.topic_word, lda.words, f, mode)
            tables.append(membership_table(encoded, words.words, words.membership))
    n = len(encoded.input_ids)
    with torch.no_grad():
        started = time.perf_counter()
        attentions = loaded.model(input_ids=encoded.input_ids,
                                  attention_mask=encoded.attention_mask.long(),
                                  output_attentions=True).attentions
        forward = time.perf_counter() - started
    started = time.perf_counter()
    gathered = attention_sums(loaded.model, encoded, tables)
    whole_pass = time.perf_counter() - started
    patterns = torch.cat(list(attentions), dim=1)
    items = encoded.position_word.clone()
    items[items < 0] = len(encoded.words)
    started = time.perf_counter()
    full = [attention_class_sums(patterns, items, table, encoded.attention_mask) for table in tables]
    full_sums = time.perf_counter() - started
    same = all(np.allclose(gathered["sums"][t], full[t][0]) for t in range(len(tables)))
    print(f"{n} passages x {encoded.input_ids.shape[1]} tokens, {len(tables)} word sets, "
          f"{args.threads} thread(s)")
    print(f"forward with attentions (one batch):         {forward / n * 1000:7.1f} ms/passage")
    print(f"attention pass as run (batches of 16):        {whole_pass / n * 1000:7.1f} ms/passage")
    print(f"class sums on the full 128x128 patterns:      {full_sums / n * 1000:7.1f} ms/passage")
    print(f"gathered and full sums equal: {same}")


if __name__ == "__main__":
    main()
