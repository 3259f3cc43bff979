"""Shared fixtures of the data tests: one smoke world and its trained tokenizer per session."""

import pytest

from cfka_jax.data.biography import BiographyConfig, generate_world
from cfka_jax.data.tokenize import train_word_tokenizer

SMOKE = BiographyConfig(num_pt_people=40, num_cpt_people=10, train_bios_per_person=5, seed=7)


@pytest.fixture(scope="session")
def world():
    return generate_world(SMOKE)


@pytest.fixture(scope="session")
def tokenizer(world, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    return train_word_tokenizer((b.text for bios in world.splits.values() for b in bios), folder)
