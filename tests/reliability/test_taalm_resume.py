"""A kill during a result write never leaves a torn file (issue 24).

* default: a subprocess SIGKILLs itself inside ``jsonio.write_text_atomic`` (after half the new text is on disk,
  before the rename): the old file is intact, readable, and the next write replaces it;
* slow: the TAALM protocol (smoke preset) is SIGKILLed during the write of ``metatrain.json``, ``phi/phi.json``,
  ``lama/taalm.json``, ``twiki/finetune.json`` and ``table.json`` in turn, each run resuming the last; the final
  tables equal an uninterrupted run's (``table.json``, ``table.md`` and every per-method result, wall times
  excepted).

Measured once (2 shared CPU cores, about a quarter of them): the chain took 33 min wall; every table and result
equal to the uninterrupted run's except ``pt_final.time_s`` (a wall time, hence ``WALL_TIMES``); the run meant to
be killed at ``twiki/finetune.json`` exited 1 instead: this test's killer wrote its half file into a ``twiki/``
folder that did not exist yet (fixed: it creates the folder, as the real writer does); the next run resumed and
completed that stage, so that kill point was exercised as a crash before the write, not yet as a kill inside it.
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from cfka_jax import jsonio
from cfka_jax.train.throughput import WALL_CLOCK

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KILLER = """
import os, signal, sys
from cfka_jax import jsonio
victim, real = sys.argv[1], jsonio.write_text_atomic
def write_then_die(path, text):
    if os.fspath(path).endswith(victim):
        folder = os.path.dirname(os.fspath(path)) or "."
        os.makedirs(folder, exist_ok=True)  # as the real writer does
        tmp = os.path.join(folder, "." + os.path.basename(path) + ".x.tmp")
        with open(tmp, "w") as f:
            f.write(text[: len(text) // 2]); f.flush(); os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, text)
jsonio.write_text_atomic = write_then_die
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_kill_during_an_atomic_write_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "result.json"
    jsonio.write_json_atomic(path, {"v": 1})
    code = KILLER + "jsonio.write_json_atomic(sys.argv[2], {'v': 2, 'pad': 'x' * 100000})\n"
    proc = _run(code, "result.json", str(path))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert jsonio.read_json_object(path) == {"v": 1}  # the old file, whole
    jsonio.write_json_atomic(path, {"v": 3})
    assert jsonio.read_json_object(path) == {"v": 3}


WALL_TIMES = ("wall_s", *WALL_CLOCK)  # seconds measured (and tokens/s, MFU from them), not computed: they differ


def _strip_wall(obj):
    if isinstance(obj, dict):
        return {k: _strip_wall(v) for k, v in obj.items() if k not in WALL_TIMES}
    if isinstance(obj, list):
        return [_strip_wall(v) for v in obj]
    return obj


def tables(out) -> dict:
    """Everything a TAALM run reports, wall times excepted: ``table.md``, ``table.json`` and every method result."""
    res = {"table.md": (out / "table.md").read_text()}
    for path in sorted(out.glob("table.json")) + sorted(out.glob("lama/*.json")) + sorted(out.glob("twiki/*.json")):
        res[str(path.relative_to(out))] = _strip_wall(jsonio.read_json(path))
    return res


def state(out) -> dict:
    """What a TAALM run resumes from, wall times excepted: φ's parameters (every leaf, as bytes), ``phi.json``,
    ``metatrain.json`` (history, validation, best step), the selected LAMA-CKL sets and the tokenizer."""
    import flax.nnx as nnx
    import jax
    import numpy as np

    from cfka_jax.continual.taalm import load_phi

    phi, _, meta = load_phi(out / "phi")
    leaves = jax.tree_util.tree_leaves_with_path(nnx.state(phi, nnx.Param))
    res = {f"phi/params{jax.tree_util.keystr(k)}": np.asarray(v).tobytes() for k, v in leaves}
    res["phi/phi.json"] = meta
    res["metatrain.json"] = _strip_wall(jsonio.read_json(out / "metatrain.json"))
    for path in sorted(out.glob("lama_ckl/*")) + sorted(out.glob("tokenizer/*")):
        res[str(path.relative_to(out))] = path.read_bytes()
    return res


ARGV = ["--preset", "smoke", "--methods", "Finetune,TAALM", "--twiki-methods", "Finetune", "--no-progress"]
VICTIMS = ("metatrain.json", "phi/phi.json", "lama/taalm.json", "twiki/finetune.json", "table.json")


def killed_chain(out) -> list[int]:
    """Run the smoke protocol into ``out``, SIGKILLed at each of ``VICTIMS`` in turn, then to the end; the exit
    statuses (a run that fails otherwise shows its stderr)."""
    code = KILLER + "from cfka_jax.experiments import taalm_command\nsys.exit(taalm_command.main(sys.argv[2:]))\n"
    codes = []
    for victim in (*VICTIMS, "<never>"):
        proc = _run(code, victim, *ARGV, "--out", str(out))
        if proc.returncode not in (0, -signal.SIGKILL):
            print(f"killed at {victim}: exit {proc.returncode}\n{proc.stderr[-4000:]}", flush=True)
        codes.append(proc.returncode)
    return codes


@pytest.mark.slow
def test_taalm_killed_at_every_result_write_resumes_to_the_same_tables(tmp_path):
    from cfka_jax.experiments import taalm_command

    ref, out = tmp_path / "ref", tmp_path / "killed"
    assert taalm_command.main([*ARGV, "--out", str(ref)]) == 0
    assert killed_chain(out) == [-signal.SIGKILL] * len(VICTIMS) + [0]
    got, want = {**tables(out), **state(out)}, {**tables(ref), **state(ref)}
    assert sorted(got) == sorted(want)
    differ = sorted(k for k in want if got[k] != want[k])
    print(f"compared {len(want)} entries ({sum(k.startswith('phi/params') for k in want)} φ parameter arrays); "
          f"differ: {differ or 'none'}", flush=True)
    assert not differ
    assert not list(out.rglob("*.json")) or all(json.loads(p.read_text()) is not None for p in out.rglob("*.json"))
