"""Tables and figures of ``experiments/taalm.py``: the LAMA-CKL table beside the paper's Llama-2-7B numbers, the
TemporalWiki table, per-epoch accuracy curves and φ's token-weight heat map."""

from __future__ import annotations

import math
import pathlib

# spec taalm.md §9 [NOTEBOOK] (observation_lamackl.ipynb cell 3), θ = Llama-2-7B: Top Acc, Epoch, NF Acc, Total.
PAPER_LAMA = {
    "Finetune": (0.1150, 16, 0.8174, 0.9324), "K-Adapter": (0.1260, 30, 0.9980, 1.1240),
    "Mix-review": (0.0800, 25, 0.7988, 0.8788), "RecAdam": (0.1000, 24, 0.7933, 0.8933),
    "RHO-1": (0.1410, 18, 0.8223, 0.9633), "TAALM": (0.4290, 4, 0.8983, 1.3273),
    "TAALM + K-Adapter": (0.3320, 21, 0.9747, 1.3067), "TAALM + Mix-review": (0.4500, 3, 0.9012, 1.3512),
    "TAALM + RecAdam": (0.4360, 7, 0.8982, 1.3342), "TAALM + K-Adapter + RecAdam": (0.2640, 13, 0.9730, 1.2370),
    "TAALM + K-Adapter + Mix-review + RecAdam": (0.3140, 25, 0.9677, 1.2817),
}
# §9 [NOTEBOOK] (observation_twiki.ipynb), θ = TinyLlama-1.1B: changed / unchanged NLL after each period.
PAPER_TWIKI = {
    "Finetune": ((10.057, 9.999), (9.531, 9.554), (9.632, 9.737)),
    "Mix-review": ((9.580, 9.529), (9.487, 9.514), (9.452, 9.563)),
    "RecAdam": ((9.605, 9.515), (9.032, 8.993), (9.480, 9.580)),
    "K-Adapter": ((4.268, 4.019), (4.154, 4.030), (4.357, 4.037)),
}


def _f(x, digits=3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def lama_markdown(results: dict[str, dict]) -> str:
    """One row per method: ours (Top Acc, Epoch, NF Acc, Total Knowledge) | the paper's, plus θ0's point."""
    head = ("| method | Top Acc | Epoch | NF Acc | Total Knowledge | paper Top Acc | paper Epoch | paper NF Acc | "
            "paper Total |\n|---|---|---|---|---|---|---|---|---|")
    rows = [head]
    for name, res in results.items():
        s = res["summary"]
        p = PAPER_LAMA.get(name)
        paper = (f"{p[0]:.4f} | {p[1]} | {p[2]:.4f} | {p[3]:.4f}" if p else "n/a | | |")
        rows.append(f"| {name} | {_f(s['top_acc'], 4)} | {s['epoch']} | {_f(s['nf_acc'], 4)} | "
                    f"{_f(s['total_knowledge'], 4)} | {paper} |")
    if results:
        first = next(iter(results.values()))["history"][0]
        rows.append(f"| θ0 (before training) | {_f(first['to_learn/acc'], 4)} | 0 | "
                    f"{_f(first['not_to_forget/acc'], 4)} | – | | | | |")
    return "\n".join(rows)


def twiki_markdown(results: dict[str, list]) -> str:
    """Two tables (changed, unchanged): per period the object NLL before → after that period's training, and
    the paper's value after the period."""
    if not results:
        return ""
    periods = [p["period"] for p in next(iter(results.values()))]
    out = []
    for i, kind in enumerate(("changed", "unchanged")):
        rows = [f"**{kind}** (before → after each period; paper: after)", "",
                "| method | " + " | ".join(periods) + " | paper |", "|" + "---|" * (len(periods) + 2)]
        for name, recs in results.items():
            cells = [f"{_f(r['before'][f'{kind}/nll'])} → {_f(r['after'][f'{kind}/nll'])}" for r in recs]
            paper = PAPER_TWIKI.get(name)
            ptxt = " / ".join(f"{p[i]:.3f}" for p in paper) if paper else "n/a"
            rows.append(f"| {name} | " + " | ".join(cells) + f" | {ptxt} |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


def plot_accuracy(results: dict[str, dict], path: pathlib.Path) -> None:
    """TO-LEARN and NOT-TO-FORGET accuracy per epoch, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    colors = plt.get_cmap("tab20")
    for i, (name, res) in enumerate(results.items()):
        hist = res["history"]
        style = "-" if "TAALM" in name or name == "Oracle" else "--"
        for ax, key in zip(axes, ("to_learn/acc", "not_to_forget/acc")):
            ax.plot([h["epoch"] for h in hist], [h[key] for h in hist], style, label=name, lw=1.4,
                    color=colors(i % 20))
    for ax, title in zip(axes, ("TO-LEARN accuracy", "NOT-TO-FORGET accuracy")):
        ax.set(title=title, xlabel="epoch (0 = before training)", ylabel="object-token accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_heatmap(rows: list[tuple[list[str], list[float], list[float]]], path: pathlib.Path, *,
                 per_line: int = 18, floor: float = 1e-12,
                 title: str = "Train-Attention weights on TO-LEARN evidence (red underline: object tokens)") -> None:
    """log10 of φ's weight of every token (colour) for a few evidence paragraphs; object tokens underlined in red.

    The scale is logarithmic because TWPPL only sees each document's *relative* weights: a trained φ puts
    ~1e-3 on an object and ~1e-10 elsewhere, which a linear scale shows as uniformly dark.

    ``rows``: (token strings, weights, object mask) per document, BOS excluded; weights below ``floor`` are
    drawn at ``floor``.
    """
    import numpy as np

    rows = [(t, np.log10(np.maximum(np.asarray(w, np.float64), floor)).tolist(), o) for t, w, o in rows]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = []
    for doc, (toks, ws, obj) in enumerate(rows):
        for lo in range(0, len(toks), per_line):
            lines.append((doc, toks[lo:lo + per_line], ws[lo:lo + per_line], obj[lo:lo + per_line]))
        lines.append(None)
    all_w = [w for _, ws, _ in rows for w in ws] or [0.0, 1.0]
    lo_w, hi_w = min(all_w), max(all_w)
    cmap = plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(14, 0.32 * len(lines) + 1))
    for y, line in enumerate(lines):
        if line is None:
            continue
        _, toks, ws, obj = line
        for x, (t, w, o) in enumerate(zip(toks, ws, obj)):
            c = cmap((w - lo_w) / max(hi_w - lo_w, 1e-9))
            ax.add_patch(plt.Rectangle((x, -y - 1), 1, 1, color=c))
            ax.text(x + 0.5, -y - 0.5, t.strip()[:9], ha="center", va="center", fontsize=6,
                    color="white" if (w - lo_w) / max(hi_w - lo_w, 1e-9) < 0.5 else "black")
            if o:
                ax.plot([x + 0.05, x + 0.95], [-y - 0.95, -y - 0.95], color="red", lw=2)
    ax.set(xlim=(0, per_line), ylim=(-len(lines), 0))
    ax.axis("off")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(lo_w, hi_w))
    fig.colorbar(sm, ax=ax, fraction=0.02, label="log10 φ weight σ(head(h))")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
