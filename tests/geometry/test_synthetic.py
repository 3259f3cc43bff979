"""The synthetic identification task: layout, class order, rules, and the identification metrics."""

import dataclasses

import numpy as np
import pytest

from cfka_jax.geometry.synthetic import (
    BOS,
    SEP,
    SPECIALS,
    ModelConfig,
    TaskConfig,
    identification,
    make_task,
    response_mask,
    template_mask,
)

CFG = TaskConfig(num_classes=3, train_per_class=5, test_per_class=2, pretrain_classes=2, pretrain_per_class=4,
                 template_len=3, input_len=4, content_tokens=9, template_vocab=6)


def test_layout_and_class_order():
    task = make_task(CFG)
    assert task.train_tokens.shape == (15, CFG.seq_len) and task.test_tokens.shape == (6, CFG.seq_len)
    assert task.pretrain_tokens.shape == (8, CFG.seq_len) and CFG.seq_len == 2 + 3 + 2 * 4
    assert task.train_labels.tolist() == [0] * 5 + [1] * 5 + [2] * 5 and task.test_labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert (task.train_tokens[:, 0] == BOS).all() and (task.train_tokens[:, 1 + 3 + 4] == SEP).all()
    assert task.train_tokens.max() < CFG.vocab_size and task.train_tokens[:, 1:4].min() >= SPECIALS
    for c in range(3):  # one template per class
        assert len({tuple(r) for r in task.train_tokens[task.train_labels == c, 1:4]}) == 1
    np.testing.assert_array_equal(make_task(CFG).train_tokens, task.train_tokens)  # deterministic


def _functional(xs, ys) -> bool:
    seen = {}
    return all(seen.setdefault(int(a), int(b)) == int(b) for a, b in zip(xs, ys))


def test_each_class_applies_one_fixed_transformation():
    """For every class and output position i some input position j maps x_j → y_i by one function, the same π_c
    for every i (y_i = π_c(x_σc(i))); across classes the maps differ."""
    task = make_task(dataclasses.replace(CFG, train_per_class=60))  # enough rows that no map holds by chance
    n, first = CFG.input_len, 1 + CFG.template_len
    maps = []
    for c in range(3):
        rows = np.concatenate([task.train_tokens[task.train_labels == c], task.test_tokens[task.test_labels == c]])
        x, y = rows[:, first:first + n], rows[:, first + n + 1:]
        pi = {}
        for i in range(n):
            sources = [j for j in range(n) if _functional(x[:, j], y[:, i])]
            assert sources, f"class {c}: output {i} is not a function of any input position"
            for a, b in zip(x[:, sources[0]], y[:, i]):
                assert pi.setdefault(int(a), int(b)) == int(b)  # one token permutation π_c per class
        maps.append(pi)
    assert maps[0] != maps[1] or maps[1] != maps[2]
    mask = response_mask(CFG, 2)
    assert mask[0].tolist() == [0.0] * (CFG.seq_len - n) + [1.0] * n
    assert template_mask(CFG, 1)[0].tolist() == [0.0, 0.0, 1.0, 1.0] + [0.0] * (CFG.seq_len - 4)


def test_map_rule_is_a_position_wise_token_map_per_class():
    """rule="map": y_i = π_c(x_i) (σ_c the identity), one π_c per class; a bad rule name is a ValueError."""
    cfg = dataclasses.replace(CFG, rule="map", train_per_class=40)
    task = make_task(cfg)
    n, first = cfg.input_len, 1 + cfg.template_len
    maps = []
    for c in range(3):
        rows = task.train_tokens[task.train_labels == c]
        x, y = rows[:, first:first + n], rows[:, first + n + 1:]
        assert _functional(x.ravel(), y.ravel()), f"class {c}: y_i is not one map of x_i"
        maps.append({int(a): int(b) for a, b in zip(x.ravel(), y.ravel())})
    assert maps[0] != maps[1] or maps[1] != maps[2]
    np.testing.assert_array_equal(task.train_tokens[:, :first + n], make_task(dataclasses.replace(
        cfg, rule="permute")).train_tokens[:, :first + n])  # same prompts: only the responses differ
    with pytest.raises(ValueError, match="rule"):
        dataclasses.replace(CFG, rule="shift")


def test_identification_metrics_on_perfect_and_reversed_scores():
    task = make_task(CFG)
    same = (task.test_labels[:, None] == task.train_labels[None, :]).astype(float)
    perfect = identification(same, task)
    assert perfect["auc_mean"] == 1.0 and perfect["recall_mean"] == 1.0 and perfect["k"] == 5
    assert identification(-same, task)["auc_mean"] == 0.0


def test_model_config_validation():
    with pytest.raises(ValueError):
        ModelConfig(arch="gpt2")  # not a registered family (llama is one)
    with pytest.raises(ValueError):
        dataclasses.replace(CFG, num_classes=0)
    assert ModelConfig(arch="pythia", hidden=16, heads=2, intermediate=24).build(CFG.vocab_size).cfg.vocab_size == 18 == CFG.vocab_size


def test_conflict_splits_reuse_the_pretraining_prompts_with_new_rules():
    task = make_task(dataclasses.replace(CFG, train_per_class=60, pretrain_per_class=60))
    t, n = CFG.template_len, CFG.input_len
    first = 1 + t
    half = t // 2
    for c in range(CFG.pretrain_classes):  # rows are ordered by class in both sets (60 per class)
        old, new = task.pretrain_tokens[60 * c, 1:first], task.conflict_train_tokens[60 * c, 1:first]
        np.testing.assert_array_equal(new[:half], old[:half])  # the first half of the template is shared ...
        assert np.all(new[half:] != old[half:])  # ... every token of the second half differs
    new_t = {tuple(r) for r in task.conflict_train_tokens[:, 1:first]}
    assert task.conflict_test_tokens.shape == (CFG.pretrain_classes * CFG.test_per_class, CFG.seq_len)
    for template in new_t:
        rows = task.conflict_train_tokens[(task.conflict_train_tokens[:, 1:first] == template).all(axis=1)]
        assert all(any(_functional(rows[:, first + j], rows[:, first + n + 1 + i]) for j in range(n))
                   for i in range(n))  # one transformation per conflict class
    np.testing.assert_array_equal(task.tokens("conflict_train"), task.conflict_train_tokens)
