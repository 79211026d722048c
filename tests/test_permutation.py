from sglab.analysis.permutation import order_blind_ceiling, permutation_sensitivity
from sglab.tasks.addition import AdditionConfig, AdditionTask, order_blind_ceiling_for_addition
from tests.conftest import tiny_model


def _prompts(task, n=64):
    test = task.split("iid_test")
    full = test.prompt_lengths == int(test.prompt_lengths.max())
    return test.tokens[full][:n, : int(test.prompt_lengths.max())]


# 1/sqrt(d_in) init: large enough weights that order effects are far above float noise
LARGE_INIT = ("model.init=gamma", "model.init_gamma=0.5")


def test_bidirectional_nope_is_permutation_invariant():
    task, model = tiny_model("model.pos_encoding=none", "model.attention_mask=bidirectional",
                             *LARGE_INIT)
    assert permutation_sensitivity(model, _prompts(task)) < 1e-5


def test_causal_or_positional_models_are_not_invariant():
    for overrides in (["model.pos_encoding=none"],
                      ["model.pos_encoding=learned", "model.attention_mask=bidirectional"],
                      ["model.pos_encoding=rotary", "model.attention_mask=bidirectional"]):
        task, model = tiny_model(*overrides, *LARGE_INIT)
        assert permutation_sensitivity(model, _prompts(task)) > 1e-3, overrides


def test_order_blind_ceiling_on_hand_built_cases():
    # "12+" and "21+" share a multiset; their answers differ -> only one can be right
    prompts = [[1, 2, 9], [2, 1, 9], [3, 4, 9]]
    answers = [[5], [6], [7]]
    assert order_blind_ceiling(prompts, answers) == 2 / 3
    # same multiset, same answer -> both can be right
    assert order_blind_ceiling([[1, 2, 9], [2, 1, 9]], [[5], [5]]) == 1.0
    # the last token is seen in place
    assert order_blind_ceiling([[1, 2, 9], [1, 9, 2]], [[5], [6]]) == 1.0


def test_order_blind_ceiling_of_addition():
    # one digit: a+b = b+a, and the multiset {a, b} fixes the sum -> order does not matter
    one = AdditionTask(AdditionConfig(digits=1, train_size=100, test_size=10, test_disjoint=False))
    assert order_blind_ceiling_for_addition(one) == 1.0
    # two digits: 12+34 and 21+43 share a multiset but not a sum
    two = AdditionTask(AdditionConfig(digits=2, train_size=100, test_size=10))
    assert 0.2 < order_blind_ceiling_for_addition(two) < 0.5
