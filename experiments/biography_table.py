"""The Biography CPT comparison table: one PT, then Naive / EWC / real replay ('all', 'half') / Freeze / LoRA CPT.

    python -m cfka_jax.experiments.biography_table --preset small --out runs/table-small

Runs (or resumes) every CPT variant of ``VARIANTS`` from the preset's PT checkpoint and writes ``table.md`` and
``table.json`` with Original sFTA/hFTA/EM (PT test biographies: what is kept) and Continual sFTA/hFTA/EM (CPT test
biographies: what is learned) at the final step, plus the PT row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

from cfka_jax.data.pipeline import build_data
from cfka_jax.runs.biography import continual, pretrain
from cfka_jax.runs.presets import BIOGRAPHY
from cfka_jax.runs.specs import CPTSpec, PTSpec

VARIANTS = (
    ("naive", "full", None),
    ("ewc", "full", None),
    ("replay-all", "full", 0.5),
    ("replay-half", "full", 0.5),
    ("naive", "freeze", None),
    ("naive", "lora", None),
)
COLUMNS = ("Original/sFTA", "Original/hFTA", "Original/EM", "Continual/sFTA", "Continual/hFTA", "Continual/EM")


@dataclasses.dataclass(frozen=True)
class TableConfig:
    preset: str = "small"
    out: str = "runs/table-small"
    arch: str = "qwen"
    ewc_lambda: float = 1e3
    cache_dir: str = "runs/data-cache"
    progress: bool = True


def _row(name: str, final: dict) -> str:
    cells = [f"{100 * final[c]:.1f}" if c in final else "–" for c in COLUMNS]
    return f"| {name} | " + " | ".join(cells) + " |"


def main(cfg: TableConfig) -> dict:
    out = pathlib.Path(cfg.out)
    pt_dir = out / f"pt-{cfg.preset}-{cfg.arch}"
    data = build_data(BIOGRAPHY[cfg.preset].data_config(), cfg.cache_dir)
    pt = pretrain(PTSpec(preset=cfg.preset, out=str(pt_dir), arch=cfg.arch, cache_dir=cfg.cache_dir,
                         progress=cfg.progress), data)
    results = {"PT": pt.final}
    for method, update, alpha in VARIANTS:
        name = f"{method} α={alpha} {update}" if alpha else f"{method} {update}"
        spec = CPTSpec(preset=cfg.preset, out=str(out / f"cpt-{method}-{update}"), method=method, update=update,
                       alpha=alpha or 0.5, ewc_lambda=cfg.ewc_lambda, arch=cfg.arch, pt_dir=str(pt_dir),
                       cache_dir=cfg.cache_dir, progress=cfg.progress)
        results[name] = continual(spec, pt, data).final
    lines = ["| run | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [_row(name, final) for name, final in results.items()]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "table.json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--out", default=None)
    ap.add_argument("--arch", default="qwen")
    ap.add_argument("--ewc-lambda", type=float, default=1e3)
    ap.add_argument("--cache-dir", default="runs/data-cache")
    a = ap.parse_args()
    main(TableConfig(preset=a.preset, out=a.out or f"runs/table-{a.preset}", arch=a.arch, ewc_lambda=a.ewc_lambda,
                     cache_dir=a.cache_dir))
