"""experiments/pt_em.py: train vs test EM of a finished PT model; an unfinished folder is refused."""

import json

import pytest

from cfka_jax.experiments.pt_em import main, train_test_em


def test_train_and_test_em_of_a_smoke_pt_run(tmp_path):
    from cfka_jax.runs.biography import pretrain
    from cfka_jax.runs.specs import PTSpec

    cache, pt = str(tmp_path / "cache"), tmp_path / "pt"
    pretrain(PTSpec(preset="smoke", out=str(pt), cache_dir=cache, progress=False))
    out = train_test_em("smoke", str(pt), cache_dir=cache)
    assert out["pt_step"] == 12 and out["train_bios_per_person"] == 5
    for name in ("Train", "Original"):
        assert 0.0 <= out[f"{name}/EM"] <= 1.0 and out[f"{name}/sFTA"] is not None
    assert json.loads((pt / "em_train_test.json").read_text())["Train/EM"] == out["Train/EM"]


def test_unfinished_pt_folder_names_the_flag(tmp_path):
    with pytest.raises(SystemExit) as err:
        main(["--preset", "smoke", "--pt-dir", str(tmp_path)])
    assert err.value.code == 2


@pytest.mark.parametrize("argv, flag", [(["--preset", "nope", "--pt-dir", "x"], "--preset"),
                                        (["--preset", "smoke", "--pt-dir", "x", "--bpe-vocab", "-5"], "--bpe-vocab"),
                                        (["--preset", "smoke", "--pt-dir", "x", "--arch", "gpt"], "--arch")])
def test_bad_flags_are_refused_naming_them(capsys, argv, flag):
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2 and flag in capsys.readouterr().err
