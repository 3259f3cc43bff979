"""Per-occurrence soft accuracies of the retention analysis agree with the sFTA metric."""

import numpy as np
from flax import nnx

from cfka_jax.eval.fta import fta
from cfka_jax.train.step import make_eval_logits
from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.presets import BIOGRAPHY as PRESETS
from cfka_jax.experiments.replay_retention import occurrence_soft
from tests.tolerances import F32


def test_mean_of_occurrence_soft_is_sfta(tmp_path):
    bundle = build_data(PRESETS["smoke"].data_config(), tmp_path)
    graphdef, params, rest = nnx.split(build_model(PRESETS["smoke"], "qwen", len(bundle.tokenizer), seed=1),
                                       nnx.Param, ...)
    logits_fn = make_eval_logits(graphdef, rest)
    packed, targets = bundle.eval["pt_test"]
    soft = occurrence_soft(logits_fn, params, packed, targets, batch=7)
    assert soft.shape == targets.chunk.shape and (soft > 0).all()
    np.testing.assert_allclose(soft.mean(), fta(logits_fn, params, packed, targets)["sFTA"], rtol=F32.exact_rtol)


def test_flags_keep_their_argparse_spelling_and_refuse_bad_values(tmp_path, capsys):
    import pytest

    from cfka_jax.experiments.replay_retention import FLAGS, Config, main

    cfg = FLAGS.parse(["--table", str(tmp_path), "--corpus", "lamol", "--runs", "cpt-a", "cpt-b",
                       "--cache-dir", "c"])
    assert cfg == Config(str(tmp_path), "lamol", ("cpt-a", "cpt-b"), "c")
    for argv, flag in ((["--table", str(tmp_path), "--runs", "a", "--corpus", "lama"], "--corpus"),
                       (["--table", str(tmp_path / "none"), "--runs", "a"], "--table"),
                       (["--table", str(tmp_path)], "--runs")):
        with pytest.raises(SystemExit) as err:
            main(argv)
        assert err.value.code == 2 and flag in capsys.readouterr().err
