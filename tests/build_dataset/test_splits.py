"""Splits by query set: no set across splits, deterministic, stable as data grows."""

from __future__ import annotations

from collections import Counter

import pytest

from agentune.tasks.build_dataset.splits import assign_splits

from support.trajectories import make_trajectories, samples_of


def test_no_query_set_spans_two_splits_and_fractions_roughly_hold() -> None:
    samples = samples_of(make_trajectories(2000, seed=11, rows_per_set=5).rows)
    split_of = assign_splits([s.group for s in samples], val_fraction=0.1, test_fraction=0.2,
                             seed=3)
    splits_per_set: dict[str, set[str]] = {}
    for sample in samples:
        splits_per_set.setdefault(sample.set_id, set()).add(split_of[sample.group])
    assert all(len(s) == 1 for s in splits_per_set.values())
    shares = Counter(split_of.values())
    n = len(splits_per_set)
    assert n == len(split_of) > 500
    assert 0.15 < shares["test"] / n < 0.25 and 0.06 < shares["val"] / n < 0.14


def test_deterministic_and_stable_when_groups_are_added() -> None:
    groups = [f"set-{i}" for i in range(300)]
    first = assign_splits(groups, val_fraction=0.1, test_fraction=0.1, seed=0)
    assert first == assign_splits(list(reversed(groups)), val_fraction=0.1, test_fraction=0.1,
                                  seed=0)
    grown = assign_splits(groups + [f"new-{i}" for i in range(300)], val_fraction=0.1,
                          test_fraction=0.1, seed=0)
    assert all(grown[g] == first[g] for g in groups)
    other_seed = assign_splits(groups, val_fraction=0.1, test_fraction=0.1, seed=1)
    assert other_seed != first


def test_small_inputs_still_get_val_and_test_groups() -> None:
    for seed in range(30):
        split = assign_splits(["a", "b", "c"], val_fraction=0.1, test_fraction=0.1, seed=seed)
        assert sorted(split.values()) == ["test", "train", "val"]
    assert set(assign_splits(["a", "b"], val_fraction=0.1, test_fraction=0.1, seed=0).values()) \
        <= {"train", "val", "test"}
    only_train = assign_splits(["a", "b", "c"], val_fraction=0.0, test_fraction=0.0, seed=0)
    assert set(only_train.values()) == {"train"}
    with pytest.raises(ValueError):
        assign_splits(["a"], val_fraction=0.5, test_fraction=0.5, seed=0)
