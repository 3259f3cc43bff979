"""Generation EM of a finished Biography PT model on its training and its test biographies (memorised vs extracted).

    python -m cfka_jax.experiments.pt_em --preset names150_1aug --pt-dir runs/pt-names150_1aug-qwen

Allen-Zhu & Li's knowledge-extraction test, as the 1-Aug row of issue #23 asks for it: a model that saw each
person in ONE biography can recite that biography (EM on the ``pt_train`` prompts high) yet fail to answer from the
other phrasings of the same facts (EM on ``pt_test``, the three held-out biographies, low); with five training
biographies per person both are high. EM as in the PT run (``eval/em.py``: T = 0.2, 32 new tokens, the first
``em_docs`` biographies of each split, clean prompts), plus the per-split sFTA the PT run recorded. Writes
``<pt-dir>/em_train_test.json``.
"""

from __future__ import annotations

import argparse
import pathlib

import jax
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.data.pipeline import build_data
from cfka_jax.eval.em import em_prompts, exact_match_rate
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY, lookup, override
from cfka_jax.runs.specs import ARCHS
from cfka_jax.train.step import master_params

SETS = {"Train": "pt_train", "Original": "pt_test"}


def train_test_em(preset: str, pt_dir: str, arch: str = "qwen", bpe_vocab: int | None = None,
                  cache_dir: str = "runs/data-cache", seed: int = 0) -> dict:
    """EM (and the recorded sFTA) of the PT model on ``pt_train`` and ``pt_test``; written next to the run."""
    p = override(lookup(BIOGRAPHY, preset, "Biography"), {"bpe_vocab": bpe_vocab} if bpe_vocab else {})
    folder = RunFolder(pt_dir)
    final = folder.final()
    if final is None:
        raise ValueError(f"--pt-dir {pt_dir} holds no finished PT run (no final.json)")
    bundle = build_data(p.data_config(), cache_dir)
    graphdef, params, rest = nnx.split(build_model(p, arch, len(bundle.tokenizer), seed=0), nnx.Param, ...)
    params, step = folder.load_params(master_params(params))
    model = nnx.merge(graphdef, params, rest)
    out = {"preset": preset, "pt_dir": str(pt_dir), "pt_step": int(step),
           "train_bios_per_person": p.data_config().bio.train_bios_per_person}
    for name, split in SETS.items():
        prompts, skipped = em_prompts(bundle.splits[split], bundle.world.people, bundle.tokenizer, max_docs=p.em_docs)
        res = exact_match_rate(model, prompts, bundle.tokenizer, key=jax.random.key(seed))
        out.update({f"{name}/{k}": v for k, v in res.items()} | {f"{name}/EM_skipped": skipped,
                                                               f"{name}/sFTA": final.get(f"{name}/sFTA")})
    jsonio.write_json_atomic(pathlib.Path(pt_dir) / "em_train_test.json", out, indent=1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", required=True, help="the PT run's Biography preset")
    ap.add_argument("--pt-dir", required=True, help="a finished PT run folder")
    ap.add_argument("--arch", default="qwen", choices=ARCHS)
    ap.add_argument("--bpe-vocab", type=int, default=None)
    ap.add_argument("--cache-dir", default="runs/data-cache")
    a = ap.parse_args(argv)
    try:
        out = train_test_em(a.preset, a.pt_dir, a.arch, a.bpe_vocab, a.cache_dir)
    except ValueError as err:
        ap.error(str(err))
    print(" ".join(f"{k} {v:.3f}" for k, v in out.items() if isinstance(v, float)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
