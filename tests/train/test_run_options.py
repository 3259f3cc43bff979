"""``--accumulate``, ``--profile`` and ``--keep-checkpoints`` through a whole run: the flags, the run folder's
config.json, the checkpoints kept, the trace and the records; resuming with another profile or retention is the
same run, with another accumulation it is not."""

import json
import pathlib

import pytest

from cfka_jax.experiments import pt
from cfka_jax.runs.biography import pretrain
from cfka_jax.runs.folder import RunFolderError
from cfka_jax.runs.specs import PTSpec
from cfka_jax.train.checkpoint import CheckpointDir


@pytest.mark.slow  # ~40 s: a smoke pre-training run (world, tokenizer, 12 steps) and a refused resume
def test_accelerator_options_of_a_pretraining_run(tmp_path):
    out, cache = tmp_path / "pt", str(tmp_path / "cache")
    cfg = pt.parse(["--preset", "smoke", "--out", str(out), "--cache-dir", cache, "--no-progress",
                    "--accumulate", "2", "--profile", "2:4", "--keep-checkpoints", "1", "--ckpt-every", "3"])
    spec = cfg.spec()
    assert (spec.accumulate, spec.profile, spec.keep_checkpoints) == (2, "2:4", 1)
    pretrain(spec)
    run = json.loads((out / "config.json").read_text())["run"]
    assert (run["accumulate"], run["profile"], run["keep_checkpoints"]) == (2, "2:4", 1)  # the effective config
    assert CheckpointDir(out / "checkpoints").steps() == [12]
    assert list(pathlib.Path(out / "profile").rglob("*.xplane.pb"))
    train = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if r["kind"] == "train"]
    assert train and all(r["mfu"] > 0 and r["tokens_per_s"] > 0 for r in train)
    # profile and retention do not change what the run computes: the same run, resumed (here: already finished)
    again = pretrain(PTSpec(preset="smoke", out=str(out), cache_dir=cache, progress=False, accumulate=2,
                            ckpt_every=3, keep_checkpoints=3))
    assert again.final["step"] == 12
    # the accumulation changes what the run computes (to float32 rounding): another value is another run
    with pytest.raises(RunFolderError, match="accumulate: folder has 2, this run has 4"):
        pretrain(PTSpec(preset="smoke", out=str(out), cache_dir=cache, progress=False, accumulate=4))


def test_options_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="--accumulate 3 must divide the preset's batch of 4 rows"):
        PTSpec(preset="smoke", out=str(tmp_path / "x"), accumulate=3)
    with pytest.raises(ValueError, match="--keep-checkpoints must be an integer >= 1"):
        PTSpec(preset="smoke", out=str(tmp_path / "x"), keep_checkpoints=0)
    with pytest.raises(ValueError, match="--profile must be START:STOP"):
        PTSpec(preset="smoke", out=str(tmp_path / "x"), profile="4:2")
    assert not (tmp_path / "x").exists()
