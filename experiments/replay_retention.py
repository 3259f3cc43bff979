"""Does generative replay keep exactly the old facts it voices? Per-fact retention after CPT, split by replay.

    python -m cfka_jax.experiments.replay_retention --table runs/stoc-small --corpus stoc \\
        --runs cpt-stoc-full-a0.5 cpt-naive-full

For one replay corpus (``<table>/replay-<corpus>``) the old facts (PT person, attribute) are split into those the
drawn replay sequences voice (``eval/coverage.voiced_facts``) and those they do not. For each CPT run (full
update, final checkpoint) the script computes the soft first-token accuracy of every Original (PT test
biography) value occurrence (spec §5.1) and reports sFTA over the voiced and the unvoiced facts. A run trained
without that corpus (naive) is the control: a gap that appears there too comes from the facts, not from replay.
Writes ``<table>/retention-<corpus>.json`` and prints a markdown table.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import numpy as np
from datasets import load_from_disk
from flax import nnx

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.data.pipeline import build_data
from cfka_jax.eval.batches import row_blocks, take
from cfka_jax.eval.coverage import voiced_facts
from cfka_jax.runs.biography import build_model
from cfka_jax.runs.folder import RunFolder
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.train.step import make_eval_logits, master_params


def final_params(run: pathlib.Path, preset: str, arch: str, vocab_size: int):
    """(graphdef, params, rest) of a full-update CPT run's final checkpoint (its parameters only)."""
    p = BIOGRAPHY[preset]
    graphdef, params, rest = nnx.split(build_model(p, arch, vocab_size, seed=0), nnx.Param, ...)
    params, step = RunFolder(run).checkpoint_params(master_params(params))
    if step != p.cpt.steps:
        raise ValueError(f"{run}: checkpoint at step {step}, expected the final step {p.cpt.steps}")
    return graphdef, params, rest


def occurrence_soft(logits_fn, params, packed, targets, batch: int = 16) -> np.ndarray:
    """softmax(logits[chunk, pos − 1])[token] for every FTA occurrence, in the targets' order."""
    soft = np.zeros(len(targets.chunk), np.float64)
    for block in row_blocks(packed.num_chunks, batch):
        b = {"tokens": take(packed.tokens, block), "positions": take(packed.positions, block)}
        probs = np.asarray(jax.nn.softmax(logits_fn(params, b), axis=-1))
        lo = int(block.rows[0])  # blocks in natural order hold rows lo … lo + num_valid − 1
        sel = (targets.chunk >= lo) & (targets.chunk < lo + block.num_valid)
        soft[sel] = probs[targets.chunk[sel] - lo, targets.pos[sel] - 1, targets.token[sel]]
    return soft


def retention(table: pathlib.Path, corpus: str, runs: list[str], cache_dir: str) -> dict:
    where = table / runs[0] / "config.json"
    stored = jsonio.read_json_object(where, "a run config (JSON object)")
    jsonio.require_keys(stored, ("run",), str(where))
    cfg = stored["run"]
    if not isinstance(cfg, dict) or "preset" not in cfg:
        raise ValueError(f"{where}: key 'run' is not a run spec with a 'preset'")
    preset = BIOGRAPHY[cfg["preset"]]
    if cfg.get("bpe_vocab") is not None:  # the run's tokenizer (``--bpe-vocab``), not the preset's word-level one
        preset = dataclasses.replace(preset, bpe_vocab=cfg["bpe_vocab"])
    bundle = build_data(preset.data_config(), cache_dir)
    texts = load_from_disk(str(table / f"replay-{corpus}" / "candidates"))["text"]
    drawn = [texts[i] for i in load_from_disk(str(table / f"replay-{corpus}" / "replay"))["candidate"]]
    _, voiced, _, _ = voiced_facts(drawn, bundle.world.people)
    packed, targets = bundle.eval["pt_test"]
    pids = bundle.splits["pt_test"].pid[targets.doc]
    is_voiced = np.array([(int(p), int(a)) in voiced for p, a in zip(pids, targets.attr)])
    out = {"corpus": corpus, "voiced_occurrences": int(is_voiced.sum()), "unvoiced_occurrences": int((~is_voiced).sum())}
    for run in runs:
        graphdef, params, rest = final_params(table / run, cfg["preset"], cfg["arch"], len(bundle.tokenizer))
        soft = occurrence_soft(make_eval_logits(graphdef, rest), params, packed, targets)
        out[run] = {"voiced_sFTA": float(soft[is_voiced].mean()), "unvoiced_sFTA": float(soft[~is_voiced].mean()),
                    "all_sFTA": float(soft.mean())}
    return out


CORPORA = ("stoc", "random", "lamol")


@dataclasses.dataclass(frozen=True)
class Config:
    """Does generative replay keep exactly the old facts it voices? Per-fact retention after CPT, split by
    replay."""

    table: str = ""
    """a stoc-table folder, or a stoc-scale seed folder (<world>/seed<k>)"""
    corpus: str = "stoc"
    """the replay corpus (<table>/replay-<corpus>) whose voiced facts are split off"""
    runs: tuple[str, ...] = ()
    """full-update CPT run folders inside --table"""
    cache_dir: str = "runs/data-cache"
    """where generated worlds and packs are cached"""

    def __post_init__(self):
        if not self.table:
            raise ValueError("--table: a stoc-table folder is required")
        if self.corpus not in CORPORA:
            raise ValueError(f"--corpus {self.corpus!r}: choose from {', '.join(CORPORA)}")
        if not self.runs:
            raise ValueError("--runs: at least one CPT run folder inside --table is required")


FLAGS = Flags(Config, prog="python -m cfka_jax.experiments.replay_retention", required=("table", "runs"),
              choices={"corpus": lambda: CORPORA}, spaced=("runs",), inputs=("table",),
              metavars={"table": "DIR", "runs": "RUN [RUN ...]", "cache_dir": "DIR"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def command(cfg: Config) -> int:
    """Writes ``<table>/retention-<corpus>.json`` and prints the voiced / unvoiced sFTA table."""
    table = pathlib.Path(cfg.table)
    res = retention(table, cfg.corpus, list(cfg.runs), cfg.cache_dir)
    jsonio.write_json_atomic(table / f"retention-{cfg.corpus}.json", res, indent=1, newline=False)
    print(f"facts voiced by the {cfg.corpus} corpus: {res['voiced_occurrences']} Original occurrences, "
          f"unvoiced: {res['unvoiced_occurrences']}\n\n| run | voiced sFTA | unvoiced sFTA | all |\n|---|---|---|---|")
    for run in cfg.runs:
        r = res[run]
        print(f"| {run} | {100 * r['voiced_sFTA']:.1f} | {100 * r['unvoiced_sFTA']:.1f} | {100 * r['all_sFTA']:.1f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
