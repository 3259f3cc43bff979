"""``--ident-rule`` / ``--ident-classes`` of ``cfka geometry transmission --world ood`` and ``cfka geometry loop``:
the identification tasks of the ood world (``geometry/ood.py``) in the variant the base model knows. The options
change the world's rule and classes and nothing else; the defaults give the recorded scale, command, regime and
seed-file key; bad values exit 2 naming the option, before anything is written."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cfka_jax.experiments import geometry, geometry_record
from cfka_jax.experiments import geometry_loop as gl
from cfka_jax.experiments import geometry_transmission_ood as gto
from tests.helpers import refused_line

KNOWN = ["--ident-rule", "map", "--ident-classes", "3"]


@pytest.mark.parametrize("scale", sorted(gto.OOD_SCALES))
def test_the_options_set_the_rule_and_classes_and_nothing_else(scale):
    s = gto.OOD_SCALES[scale]
    assert gto.study_scale(scale) == s and gto.study_scale(scale, "permute", s.world.classes) == s
    known = gto.study_scale(scale, "map", 3)
    assert known == dataclasses.replace(s, world=dataclasses.replace(s.world, ident_rule="map", classes=3))
    assert gto.study_scale(scale, "map", 0).world.classes == s.world.classes


def test_transmission_parses_the_options_and_keeps_the_default_command():
    _, cfg = geometry.configs(["transmission", "--world", "ood", "--scale", "small", *KNOWN, "--seeds", "0,1,2",
                               "--record", "transmission_ood_known"])
    assert (cfg.ident_rule, cfg.ident_classes) == ("map", 3)
    assert geometry_record.command_line("transmission", cfg).endswith(
        "--world ood --ident-rule map --ident-classes 3 --seeds 0,1,2 --out runs/geometry/transmission-small "
        "--record transmission_ood_known")
    _, default = geometry.configs(["transmission", "--world", "ood", "--scale", "small", "--seeds", "0,1,2",
                                   "--record", "transmission_ood"])
    assert (default.ident_rule, default.ident_classes) == ("permute", 0)
    assert "ident" not in geometry_record.command_line("transmission", default)


def test_the_regime_names_the_variant_only_when_it_is_set():
    s = gto.study_scale("small", "map", 3)
    assert "ident_tasks" not in gto._regime(gto.OOD_SCALES["small"], 1)
    assert gto._regime(s, 1, True)["ident_tasks"] == "identification tasks: rule map (f_c(x)_i = π_c(x_i)), 3 classes"
    assert {k: v for k, v in gto._regime(s, 1, True).items() if k != "ident_tasks"} == gto._regime(s, 1)
    loop = gl.LoopStudyConfig(scale="smoke")
    assert "ident_tasks" not in gl.regime(loop)
    assert "rule map" in gl.regime(dataclasses.replace(loop, ident_rule="map", ident_classes=3))["ident_tasks"]


def test_run_ood_and_the_loop_build_the_chosen_world(monkeypatch, tmp_path):
    seen = []

    class Stop(Exception):
        pass

    def capture(out, s, seed, *a):
        seen.append(s)
        raise Stop

    monkeypatch.setattr(gto, "_cached_seed", capture)
    _, cfg = geometry.configs(["transmission", "--world", "ood", *KNOWN, "--out", str(tmp_path / "t")])
    with pytest.raises(Stop):
        gto.run_ood(cfg)
    assert seen[-1].world == dataclasses.replace(gto.OOD_SCALES["smoke"].world, ident_rule="map", classes=3)

    def world(w):
        seen.append(w)
        raise Stop

    monkeypatch.setattr(gl, "make_world", world)
    with pytest.raises(Stop):
        gl.run_seed(gl.LoopStudyConfig(ident_rule="map", ident_classes=2), seed=1)
    assert seen[-1] == dataclasses.replace(gto.OOD_SCALES["smoke"].world, ident_rule="map", classes=2, seed=1)


def test_the_seed_file_key_of_the_default_world_is_unchanged(monkeypatch, tmp_path):
    runs = []

    def fake(s, seed, resets, sft_lr, log=print):
        runs.append(s.world.ident_rule)
        return {"R": {}, "R_norm": {}, "readout_size": {}, "acc": {}, "chance": {}, "curves": {}, "seconds": 0.0,
                "params": 1}

    monkeypatch.setattr(gto, "run_seed", fake)
    resets = ("none", "readout")
    for rule, out in (("permute", tmp_path / "d"), ("map", tmp_path / "m")):
        gto._cached_seed(out, gto.study_scale("smoke", rule), 0, resets, 1e-3)
        key = json.loads((out / "seed0.json").read_text())["key"]
        # the default world's key is the one seed files had before ident_rule existed
        assert ("ident_rule" in key["scale"]["world"]) == (rule == "map")
    gto._cached_seed(tmp_path / "d", gto.OOD_SCALES["smoke"], 0, resets, 1e-3)  # read back, not rerun
    assert runs == ["permute", "map"]
    gto._cached_seed(tmp_path / "d", gto.study_scale("smoke", "map"), 0, resets, 1e-3)  # another world: rerun
    assert runs == ["permute", "map", "map"]


@pytest.mark.parametrize("argv, words", [
    (["transmission", "--world", "ood", "--ident-rule", "swap"], ["--ident-rule", "swap"]),
    (["transmission", "--world", "ood", "--ident-classes", "-1"], ["--ident-classes"]),
    (["transmission", "--world", "ood", "--ident-classes", "three"], ["--ident-classes"]),
    (["transmission", "--world", "ood", "--scale", "small", "--ident-classes", "61"], ["--ident-classes", "61", "60"]),
    (["transmission", "--ident-rule", "map"], ["--ident-rule", "--world ood"]),
    (["transmission", "--ident-classes", "3"], ["--ident-classes", "--world ood"]),
    (["loop", "--ident-rule", "swap"], ["--ident-rule", "swap"]),
    (["loop", "--ident-classes", "7"], ["--ident-classes", "7", "smoke"]),
])
def test_bad_values_exit_2_naming_the_option(argv, words, capsys, monkeypatch, tmp_path):
    code, last = refused_line(["geometry", *argv, "--out", "unused"], capsys, monkeypatch, tmp_path)
    assert code == 2 and "error" in last and "Traceback" not in last
    for word in words:
        assert word in last, (word, last)
    assert not list(tmp_path.iterdir())


def test_the_configs_refuse_bad_values_built_directly():
    from cfka_jax.experiments.geometry_transmission import TransmissionConfig

    for kwargs, word in (({"ident_rule": "swap"}, "--ident-rule"), ({"ident_classes": -1}, "--ident-classes"),
                         ({"ident_classes": True}, "--ident-classes"), ({"ident_classes": 2.0}, "--ident-classes"),
                         ({"ident_classes": 7}, "--ident-classes")):
        with pytest.raises(ValueError, match=word):
            gl.LoopStudyConfig(**kwargs)
        with pytest.raises(ValueError, match=word):
            TransmissionConfig(world="ood", **kwargs)
    with pytest.raises(ValueError, match="--world ood"):
        TransmissionConfig(ident_rule="map")
    with pytest.raises(ValueError, match="--scale"):
        gto.study_scale("paper")


def test_a_finished_seed_from_before_a_field_existed_still_matches_at_its_default():
    cfg = gl.LoopStudyConfig(scale="smoke", seeds=(0,))
    old = {k: v for k, v in geometry_record._what(cfg).items() if not k.startswith("ident_")}
    assert geometry_record.same_config(old, cfg) and geometry_record.same_config(geometry_record._what(cfg), cfg)
    assert not geometry_record.same_config(old, dataclasses.replace(cfg, ident_rule="map"))
    assert not geometry_record.same_config({**old, "rounds": 5}, cfg)
    assert not geometry_record.same_config({**geometry_record._what(cfg), "gone": 1}, cfg)
