"""Attention by slot in two ``cfka di-attention`` panels, over the token types both count (issue #23's 1-Aug check).

Two worlds (e.g. ``names150``: five training biographies per person, ``names150_1aug``: one) give each token type
a slot (name, relation, template, object), a context count n_s, a Diversity Index and the attention it receives
(``OUT/attention.npz``: ``z_ELM``, seed × layer × type). The panels' own eligibility (n_s ≥ ``--min-count``) differs
between worlds, so this compares the types that are eligible in both and hold the same slot in both: per slot, the
mean received attention (pooled layers, per seed: mean (min–max)), per layer, the mean n_s and the mean DI of the
named convention. The theory (spec §2.6) predicts lower attention where the DI is higher.

    python -m cfka_jax.experiments.di_slots DI_A DI_B [--di centred_cooccur]
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

from cfka_jax import jsonio
from cfka_jax.cli_gen import Flags, script_main
from cfka_jax.lm_theory import biography as bio

KEYS = ("z_ELM", "slots", "eligible", "n_s")


def load(folder: str | pathlib.Path, di: str) -> dict:
    """The arrays of one panel folder (``attention.npz``), checked for the keys this needs."""
    path = pathlib.Path(folder) / "attention.npz"
    return jsonio.read_npz(path, keys=KEYS + (f"di_{di}",))


def compare(a: dict, b: dict, di: str) -> list[dict]:
    """One row per slot over the types eligible in both panels with the same slot in both."""
    if a["slots"].shape != b["slots"].shape:
        raise ValueError(f"the two panels count different vocabularies ({a['slots'].shape[0]} vs "
                         f"{b['slots'].shape[0]} token types)")
    both = a["eligible"] & b["eligible"] & (a["slots"] == b["slots"])
    rows = []
    for i, slot in enumerate(bio.SLOTS[:4]):
        sel = both & (a["slots"] == i)
        row = {"slot": slot, "types": int(sel.sum())}
        for tag, p in (("a", a), ("b", b)):
            if sel.any():
                z_E = p["z_ELM"][:, :, sel].mean(axis=(1, 2))
                row[tag] = {"attention": float(z_E.mean()), "min": float(z_E.min()), "max": float(z_E.max()),
                            "per_layer": p["z_ELM"][:, :, sel].mean(axis=(0, 2)).tolist(),
                            "contexts": float(p["n_s"][sel].mean()), "di": float(p[f"di_{di}"][sel].mean())}
        rows.append(row)
    return rows


def table(rows: list[dict], names: tuple[str, str], di: str) -> str:
    a, b = names
    lines = [f"| slot | types in both | attention {a} | attention {b} | per layer {a} | per layer {b} | contexts "
             f"{a} / {b} | DI ({di}) {a} / {b} |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["types"]:
            lines.append(f"| {r['slot']} | 0 | – | – | – | – | – | – |")
            continue
        f = lambda s: f"{s['attention']:.4f} ({s['min']:.4f}–{s['max']:.4f})"  # noqa: E731
        lay = lambda s: " / ".join(f"{v:.4f}" for v in s["per_layer"])  # noqa: E731
        lines.append(f"| {r['slot']} | {r['types']} | {f(r['a'])} | {f(r['b'])} | {lay(r['a'])} | {lay(r['b'])} | "
                     f"{r['a']['contexts']:.0f} / {r['b']['contexts']:.0f} | {r['a']['di']:.3f} / "
                     f"{r['b']['di']:.3f} |")
    return "\n".join(lines)


DI_CONVENTIONS = ("centred_cooccur", "uncentred_cooccur", "centred_all", "uncentred_all")


@dataclasses.dataclass(frozen=True)
class Config:
    """Attention by slot in two ``cfka di-attention`` panels, over the token types both count (the 1-Aug check)."""

    a: str = ""
    """first di-attention run folder"""
    b: str = ""
    """second di-attention run folder"""
    di: str = "centred_cooccur"
    """the Diversity Index convention compared"""

    def __post_init__(self):
        if not self.a or not self.b:
            raise ValueError("two di-attention run folders are required (a and b)")
        if self.di not in DI_CONVENTIONS:
            raise ValueError(f"--di {self.di!r}: choose from {', '.join(DI_CONVENTIONS)}")


FLAGS = Flags(Config, prog="python -m cfka_jax.experiments.di_slots", positional=("a", "b"), required=("a", "b"),
              choices={"di": lambda: DI_CONVENTIONS}, metavars={"a": "A", "b": "B"})
"""The command line generated from :class:`Config` (``cfka_jax/cli_gen.py``)."""


def command(cfg: Config) -> int:
    """Prints the slot table; a missing or malformed panel is one line ``error: ...``, status 2."""
    try:
        rows = compare(load(cfg.a, cfg.di), load(cfg.b, cfg.di), cfg.di)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(rows, (pathlib.Path(cfg.a).name, pathlib.Path(cfg.b).name), cfg.di))
    return 0


def main(argv: list[str] | None = None) -> int:
    return script_main(FLAGS, command, argv)


if __name__ == "__main__":
    raise SystemExit(main())
