"""Run folders record the version of the run-option defaults; an older folder resumes with the flags that give its
old defaults, and a refusal names those flags in one line."""

import dataclasses
import json

import pytest

from cfka_jax.runs.folder import CONFIG_VERSION, RunFolder, RunFolderError


@dataclasses.dataclass(frozen=True)
class Run:
    steps: int = 4
    remat: bool | None = True
    loss_chunk: int | None = None
    scan_layers: bool = True
    guard: str = "gradient"


def _old_folder(tmp_path, **run):
    """A folder as version 1 wrote it: no config_version, its defaults (remat and loss_chunk unset: off)."""
    old = {"steps": 4, "remat": None, "loss_chunk": None, "scan_layers": False, "guard": "state", **run}
    (tmp_path / "config.json").write_text(json.dumps({"run": old, "preset": {"name": "smoke"}}))
    return RunFolder(tmp_path)


def test_a_new_folder_records_the_config_version(tmp_path):
    RunFolder(tmp_path / "run").start(Run(), {"name": "smoke"})
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["config_version"] == CONFIG_VERSION == 2
    assert RunFolder(tmp_path / "run").check(Run(), {"name": "smoke"})  # resumes itself


def test_an_old_folder_under_todays_defaults_is_refused_with_the_flags_that_resume_it(tmp_path):
    folder = _old_folder(tmp_path)
    before = (tmp_path / "config.json").read_text()
    with pytest.raises(RunFolderError) as err:
        folder.start(Run(), {"name": "smoke"})
    message = str(err.value)
    assert "\n" not in message and "config version 1" in message
    assert "--no-remat" in message and "--no-scan-layers" in message and "--loss-chunk 0" in message
    assert (tmp_path / "config.json").read_text() == before  # nothing written


def test_an_old_folder_resumes_with_those_flags_and_any_guard(tmp_path):
    folder = _old_folder(tmp_path)
    assert folder.check(Run(remat=False, loss_chunk=0, scan_layers=False), {"name": "smoke"})
    assert folder.check(Run(remat=False, loss_chunk=0, scan_layers=False, guard="state"), {"name": "smoke"})
    assert "config_version" not in json.loads((tmp_path / "config.json").read_text())  # left as it was
    explicit = _old_folder(tmp_path, remat=True, loss_chunk=256, scan_layers=True)  # old flags set by hand
    assert explicit.check(Run(remat=True, loss_chunk=256), {"name": "smoke"})


def test_other_differences_are_still_another_run(tmp_path):
    folder = _old_folder(tmp_path)
    with pytest.raises(RunFolderError, match="holds another run") as err:
        folder.check(Run(steps=5, remat=False, loss_chunk=0, scan_layers=False), {"name": "smoke"})
    assert "run.steps" in str(err.value)


@pytest.mark.parametrize("version", [3, 0, "2", True])
def test_an_unknown_config_version_is_refused_naming_the_file(tmp_path, version):
    (tmp_path / "config.json").write_text(json.dumps({"run": dataclasses.asdict(Run()), "preset": {},
                                                      "config_version": version}))
    with pytest.raises(RunFolderError, match=r"config\.json: config_version"):
        RunFolder(tmp_path).check(Run(), {})
