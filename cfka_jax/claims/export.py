"""Claims tables: plain text (the terminal), JSON, Markdown and a LaTeX tabular; plots; atomic writes.

``write_tables(claims, out_dir)`` writes ``proofs.txt``, ``proofs.json``, ``proofs.md`` and ``proofs.tex`` side
by side, each atomically (``jsonio.write_text_atomic``: a temporary file in the same folder, then renamed), so an
interrupted run never leaves a half-written table. The LaTeX tabular keeps the Unicode of the statements (η, λ,
∇ …): compile it with XeLaTeX/LuaLaTeX, or with pdfLaTeX and ``newunicodechar``; LaTeX's special characters are
escaped.
"""

from __future__ import annotations

import json
import math
import os
import pathlib

from cfka_jax import jsonio
from cfka_jax.claims.record import Claim, counts

COLUMNS = ("lemma", "claim", "measured", "tolerance", "status")


def _cells(c: Claim) -> tuple[str, ...]:
    return c.lemma, c.statement, f"{c.measured:.3e}", f"{c.tolerance:.1e}", c.status


def format_table(claims: list[Claim]) -> str:
    """Plain-text table: lemma | claim | measured | tolerance | status."""
    rows = [COLUMNS] + [_cells(c) for c in claims]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_report(claims: list[Claim]) -> str:
    """The table, then one ``[lemma] detail`` line per row that has a detail (the text of ``proofs.txt``)."""
    return format_table(claims) + "\n\n" + "\n".join(f"[{c.lemma}] {c.detail}" for c in claims if c.detail)


def _json_number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)  # strict JSON has no NaN/Infinity: write them as strings


def to_json(claims: list[Claim]) -> str:
    """{"counts": {...}, "claims": [{id, check, lemma, statement, measured, tolerance, status, detail, quoted}]}."""
    rows = [{"id": c.id, "check": c.check, "lemma": c.lemma, "statement": c.statement,
             "measured": _json_number(c.measured), "tolerance": _json_number(c.tolerance), "status": c.status,
             "detail": c.detail, "quoted": c.quoted} for c in claims]
    return json.dumps({"counts": counts(claims), "claims": rows}, ensure_ascii=False, indent=1, allow_nan=False)


def to_markdown(claims: list[Claim]) -> str:
    """A GitHub Markdown table with the same columns as the text table (``|`` in cells escaped)."""
    esc = lambda s: s.replace("|", "\\|")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(esc(cell) for cell in _cells(c)) + " |" for c in claims]
    return "\n".join(lines)


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """Escapes LaTeX's ten special characters."""
    return "".join(_LATEX.get(ch, ch) for ch in text)


def _latex_number(x: float, digits: int) -> str:
    if not math.isfinite(x):
        return latex_escape(str(x))
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"${mantissa}\\times 10^{{{int(exponent)}}}$"


def to_latex(claims: list[Claim]) -> str:
    """A ``tabular`` (booktabs rules) with lemma, claim, measured, tolerance, status."""
    lines = [r"\begin{tabular}{llrrl}", r"\toprule", r"lemma & claim & measured & tolerance & status \\", r"\midrule"]
    lines += [f"{latex_escape(c.lemma)} & {latex_escape(c.statement)} & {_latex_number(c.measured, 3)} & "
              f"{_latex_number(c.tolerance, 1)} & {c.status} \\\\" for c in claims]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def write_tables(claims: list[Claim], out_dir: str | os.PathLike) -> dict[str, pathlib.Path]:
    """Writes proofs.txt / .json / .md / .tex into ``out_dir`` (atomically); returns {format: path}."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = {"txt": format_report(claims) + "\n", "json": to_json(claims) + "\n", "md": to_markdown(claims) + "\n",
             "tex": to_latex(claims) + "\n"}
    paths = {fmt: out / f"proofs.{fmt}" for fmt in texts}
    for fmt, text in texts.items():
        jsonio.write_text_atomic(paths[fmt], text)
    return paths


def save_figure(fig, out_dir: str | os.PathLike, name: str) -> pathlib.Path:
    """Writes ``fig`` as ``out_dir/name.png`` (tight layout, 110 dpi) and closes it."""
    import matplotlib.pyplot as plt

    path = pathlib.Path(out_dir) / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
