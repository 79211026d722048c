"""Two-digit modular arithmetic with several answer digits (thesis Ch. 3, App. B.3).

``add_mul``: (a op b) mod 100 for two-digit a, b and op in {+, *}; input tokens
``a1 a0 b1 b0 op``, answer the two digits of the result (20,000 distinct inputs).
``double_add``: (a + b) mod 100 and (c + d) mod 100 from ``a1 a0 b1 b0 c1 c0 d1 d0``;
answer four digits, pair 1's two then pair 2's.

The classifier contract has k answer slots: a model returns logits [batch, k, vocab],
targets are [batch, k] and an example is right when all its scored slots are. ``subset``
restricts the *training* examples (``add``/``mul``: one operation; ``pair1``/``pair2``:
the other pair's inputs are zeroed, i.e. padding, and its answer digits are not scored);
the evaluation splits always hold every kind of example, with accuracy per operation
(``exact_match/op=add``) or per pair (``exact_match/pair=1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from sglab import registry
from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.base import IGNORE, Batch, SplitsTask, Vocabulary, scored_batches

DIGITS = [str(d) for d in range(10)]
OPS = ["+", "*"]


class ModularConfig(TaskConfig):
    train_size: int | None = Field(None, ge=1, description="Training examples (null: all "
                                                           "inputs for add_mul, 100,000 else).")
    valid_size: int = Field(2000, ge=1, description="Examples in iid_valid and in iid_test.")

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"]


class AddMulConfig(ModularConfig):
    name: Literal["add_mul"] = "add_mul"
    subset: Literal["all", "add", "mul"] = "all"


class DoubleAddConfig(ModularConfig):
    name: Literal["double_add"] = "double_add"
    subset: Literal["all", "pair1", "pair2"] = "all"


def digits(values: torch.Tensor) -> torch.Tensor:
    """Two-digit numbers [n] -> digit token positions [n, 2] (tens, ones)."""
    return torch.stack([values // 10, values % 10], 1)


class ModularTask(SplitsTask):
    """Examples are fixed-width token rows ``tokens`` [n, width] and answers [n, k]."""

    eval_splits = ["iid_valid", "iid_test"]
    answer_slots: ClassVar[int]

    def __init__(self, config: ModularConfig):
        self.config = config
        self.vocab = Vocabulary(self.symbols())
        self.digit_ids = torch.tensor(self.vocab.encode(DIGITS))
        generator = torch.Generator().manual_seed(config.data_seed)
        self.splits = {
            "train": self.examples(self.train_operands(generator)),
            "iid_valid": self.examples(self.sample_operands(config.valid_size, generator)),
            "iid_test": self.examples(self.sample_operands(config.valid_size, generator)),
        }

    def symbols(self) -> list[str]:
        return DIGITS

    @property
    def max_length(self) -> int:
        return self.splits["train"]["tokens"].shape[1]

    def check_model(self, model_config) -> None:
        outputs = getattr(model_config, "outputs", None)
        if outputs is not None and outputs != self.answer_slots:
            raise SglabError(f"task {self.config.name} has {self.answer_slots} answer digits: set "
                             f"model.outputs={self.answer_slots}")

    def train_operands(self, generator: torch.Generator) -> torch.Tensor:
        return self.sample_operands(self.config.train_size or 100_000, generator)

    def sample_operands(self, n: int, generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def examples(self, operands: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def training_view(self, tokens, answers, groups):
        return tokens, answers

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        train = self.splits["train"]
        index = torch.randint(len(train["tokens"]), (batch_size,), generator=generator)
        tokens, answers = self.training_view(train["tokens"][index], train["answers"][index],
                                             {k: v[index] for k, v in train.items()})
        return Batch(tokens, answers)

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The first ``max_examples`` examples (all: None), every answer slot scored."""
        data = self.split(split)
        for rows in scored_batches(len(data["tokens"]), batch_size, max_examples, spread=False):
            yield Batch(data["tokens"][rows], data["answers"][rows])

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """Per example: the predicted answer tokens [k], which slots are right, the loss
        averaged over the slots."""
        answers = batch.targets
        predicted = logits.argmax(-1)
        loss = F.cross_entropy(logits.flatten(0, 1), answers.flatten(), reduction="none")
        return {"predicted": predicted, "right": predicted == answers,
                "loss": loss.view(answers.shape).mean(1)}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """Exact match (every slot right), loss, and the task's :meth:`group_metrics`."""
        right_slots = totals["right"]
        metrics = {f"{split}/exact_match": float(right_slots.all(1).float().mean()),
                   f"{split}/loss": float(totals["loss"].mean())}
        metrics.update(self.group_metrics(split, self.split(split), right_slots))
        return metrics

    def group_metrics(self, split, data, right_slots) -> dict[str, float]:
        return {}


class AddMulTask(ModularTask):
    answer_slots = 2

    def symbols(self) -> list[str]:
        return DIGITS + OPS

    def all_operands(self) -> torch.Tensor:
        """Every (a, b, op) input: [20000, 3], op 0 = add, 1 = mul."""
        a, b, op = torch.meshgrid(torch.arange(100), torch.arange(100), torch.arange(2),
                                  indexing="ij")
        return torch.stack([a.flatten(), b.flatten(), op.flatten()], 1)

    def train_operands(self, generator):
        operands = self.all_operands()
        if self.config.train_size is None:
            return operands
        return operands[torch.randint(len(operands), (self.config.train_size,),
                                      generator=generator)]

    def sample_operands(self, n, generator):
        operands = self.all_operands()
        return operands[torch.randint(len(operands), (n,), generator=generator)]

    def examples(self, operands):
        a, b, op = operands.unbind(1)
        result = torch.where(op == 0, (a + b) % 100, (a * b) % 100)
        op_ids = torch.tensor(self.vocab.encode(OPS))[op]
        tokens = torch.cat([self.digit_ids[digits(a)], self.digit_ids[digits(b)], op_ids[:, None]], 1)
        return {"tokens": tokens, "answers": self.digit_ids[digits(result)], "op": op,
                "a": a, "b": b}

    def training_view(self, tokens, answers, groups):
        return tokens, answers

    def __init__(self, config: AddMulConfig):
        super().__init__(config)
        if config.subset != "all":  # train on one operation only
            train = self.splits["train"]
            keep = train["op"] == ["add", "mul"].index(config.subset)
            self.splits["train"] = {k: v[keep] for k, v in train.items()}

    def group_metrics(self, split, data, right_slots):
        correct = right_slots.all(1).float()
        op = data["op"][: len(correct)]
        return {f"{split}/exact_match/op={name}": float(correct[op == i].mean())
                for i, name in enumerate(["add", "mul"]) if bool((op == i).any())}


class DoubleAddTask(ModularTask):
    answer_slots = 4

    def sample_operands(self, n, generator):
        return torch.randint(100, (n, 4), generator=generator)

    def examples(self, operands):
        a, b, c, d = operands.unbind(1)
        tokens = torch.cat([self.digit_ids[digits(x)] for x in (a, b, c, d)], 1)
        answers = torch.cat([self.digit_ids[digits((a + b) % 100)],
                             self.digit_ids[digits((c + d) % 100)]], 1)
        return {"tokens": tokens, "answers": answers}

    def training_view(self, tokens, answers, groups):
        if self.config.subset == "all":
            return tokens, answers
        tokens, answers = tokens.clone(), answers.clone()
        other = slice(4, 8) if self.config.subset == "pair1" else slice(0, 4)
        tokens[:, other] = self.vocab.pad_id  # the other pair's input zeroed
        answers[:, slice(2, 4) if self.config.subset == "pair1" else slice(0, 2)] = IGNORE
        return tokens, answers

    def group_metrics(self, split, data, right_slots):
        return {f"{split}/exact_match/pair={k + 1}":
                float(right_slots[:, 2 * k:2 * k + 2].all(1).float().mean()) for k in range(2)}


@registry.register("task", "add_mul", AddMulConfig, "(a op b) mod 100, op in {+, *} (thesis B.3)")
def make_add_mul(config: AddMulConfig) -> AddMulTask:
    return AddMulTask(config)


@registry.register("task", "double_add", DoubleAddConfig,
                   "(a + b) mod 100 and (c + d) mod 100 (thesis B.3)")
def make_double_add(config: DoubleAddConfig) -> DoubleAddTask:
    return DoubleAddTask(config)
