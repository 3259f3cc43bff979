"""One smoke Biography bundle per session for the lm_theory tests."""

import pytest

from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.presets import BIOGRAPHY


@pytest.fixture(scope="session")
def bundle(tmp_path_factory):
    return build_data(BIOGRAPHY["smoke"].data_config(), tmp_path_factory.mktemp("data"))
