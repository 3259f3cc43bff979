"""The verdict table: every claim's verdict derived from the records, and the tables generated from it.

``derive(records)`` runs every claim's rule on the records it names and returns one :class:`Row` per claim (the
registered empirical claims of the three papers, then the lemma rows of the proofs record). The table is written
as text, JSON (one object per claim: :data:`JSON_KEYS`), Markdown and LaTeX, and into *generated blocks* of the
README and docs: a block starts with ``<!-- claims:SPEC -->`` and ends with ``<!-- /claims -->``, and SPEC is one
of

* ``summary`` — per paper, the count of each verdict (empirical and lemma rows apart), then the headline findings;
* ``table PAPER [empirical|lemma]`` — the paper's full table;
* ``claim ID [ID ...]`` — the rows of the named claims (a results page puts them beside its explanation);
* ``record NAME BY[,BY...] METRIC[,METRIC...] [KEY=VALUE ...]`` — a record's runs summarised per value of the
  factors BY (rows selected by the KEY=VALUE pairs, VALUE|VALUE for any of several): per metric the mean and range
  over every run and, with several PT models, each PT model's mean (:func:`record_markdown`), so a results page's
  numbers are the record's.

:func:`check_docs` regenerates every block and names the file and line of each one that differs from what the
records give; :func:`write_docs` rewrites them.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cfka_jax.claims.export import latex_escape
from cfka_jax.claims.papers import PAPER_TITLES, PAPERS, PaperClaim, paper_claims
from cfka_jax.claims.papers.lemmas import RECORD as LEMMA_RECORD
from cfka_jax.claims.papers.lemmas import lemma_claims
from cfka_jax.claims.results import Record
from cfka_jax.claims.verdicts import VERDICTS, Judgement, cells

JSON_KEYS = ("id", "paper", "kind", "section", "statement", "paper_value", "paper_regime", "ours", "regime",
             "verdict", "reason", "seeds", "pt_replicates", "record", "records", "command", "explanation",
             "accelerator")
"""The keys of each claim's object in ``cfka claims --json``."""


class ClaimsError(ValueError):
    """A claim that cannot be judged from the records (a missing record, a rule that fails on its records)."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One claim of the table with its derived verdict.

    Attributes:
      claim: the registered claim.
      judgement: what its rule returned on its records.
      seeds: the fewest seeds among its records of seeded runs (a record of PT models' quality or of cost timings,
        :attr:`Record.unit`, counts only when the claim reads nothing else; 0 without records).
      pt_replicates: the fewest PT replicates among its records (0 without records or PT models).
      record: ``produced`` (every record it reads was written by its experiment), ``transcribed`` (at least one
        was entered from the docs) or ``none``.
      regime: the regime here, from its records' ``regime``.
    """

    claim: PaperClaim
    judgement: Judgement
    seeds: int
    pt_replicates: int
    record: str
    regime: str

    def to_json(self) -> dict:
        c, j = self.claim, self.judgement
        return {"id": c.id, "paper": c.paper, "kind": c.kind, "section": c.section, "statement": c.statement,
                "paper_value": c.paper_value, "paper_regime": c.paper_regime, "ours": j.ours,
                "regime": self.regime, "verdict": j.verdict, "reason": j.reason, "seeds": self.seeds,
                "pt_replicates": self.pt_replicates, "record": self.record, "records": list(c.records),
                "context": list(c.context), "command": c.command, "explanation": c.explanation, "accelerator": c.accelerator}


def _regime(records: Sequence[Record]) -> str:
    if not records:
        return ""
    parts = [f"{k}: {v}" for k, v in records[0].regime.items()]
    return "; ".join(parts)


def judge(claim: PaperClaim, records: Mapping[str, Record]) -> Row:
    """The claim's row: its rule on exactly the records it names (``records``, which decide it, and ``context``,
    shown beside it); the seeds, PT replicates, origin and regime are those of ``records`` alone.

    Raises:
      ClaimsError: a named record is missing, the rule fails on the records, or a verdict other than
        ``not tested`` rests on no record.
    """
    missing = [n for n in (*claim.records, *claim.context) if n not in records]
    if missing:
        raise ClaimsError(f"claim {claim.id}: no record " + ", ".join(f"results/{n}.json" for n in missing))
    mine = {n: records[n] for n in claim.records}
    try:
        j = claim.rule({**mine, **{n: records[n] for n in claim.context}})
    except (KeyError, ValueError, TypeError, ZeroDivisionError) as err:
        raise ClaimsError(f"claim {claim.id}: its rule fails on its records: {err}") from err
    if not isinstance(j, Judgement):
        raise ClaimsError(f"claim {claim.id}: its rule returned {type(j).__name__}, not a Judgement")
    if j.verdict != "not tested" and not mine:
        raise ClaimsError(f"claim {claim.id}: verdict {j.verdict!r} rests on no record")
    recs = list(mine.values())
    origin = "none" if not recs else ("transcribed" if any(r.origin == "transcribed" for r in recs) else "produced")
    seeded = [r for r in recs if r.unit == "run"] or recs
    seeds = min((r.seeds for r in seeded), default=0)
    pts = min((r.pt_replicates for r in recs), default=0)
    return Row(claim, j, seeds, pts, origin, _regime(recs))


def all_claims(records: Mapping[str, Record]) -> tuple[PaperClaim, ...]:
    """The registered empirical claims, then the lemma rows of the proofs record."""
    return (*paper_claims(), *lemma_claims(records.get(LEMMA_RECORD)))


def derive(records: Mapping[str, Record]) -> list[Row]:
    """Every claim's row (see :func:`judge`)."""
    return [judge(c, records) for c in all_claims(records)]


def unread(records: Mapping[str, Record], rows: Iterable[Row]) -> list[str]:
    """Records no claim reads."""
    read = {n for r in rows for n in (*r.claim.records, *r.claim.context)}
    return sorted(set(records) - read)


def counts(rows: Iterable[Row]) -> dict[str, int]:
    rows = list(rows)
    return {v: sum(r.judgement.verdict == v for r in rows) for v in VERDICTS}


# ---------------------------------------------------------------------------------------------------------- formats

def to_text(rows: Sequence[Row]) -> str:
    """The terminal table: id, verdict, record, seeds × PT, ours, the paper's number."""
    head = ("claim", "verdict", "record", "seeds×PT", "ours", "paper")
    cells = [head] + [(r.claim.id, r.judgement.verdict, r.record, f"{r.seeds}×{r.pt_replicates}",
                       r.judgement.ours[:48], r.claim.paper_value[:48]) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


MD_HEAD = ("claim", "the paper", "ours", "regime here", "verdict", "why", "record", "command")


def _md_row(r: Row) -> str:
    c, j = r.claim, r.judgement
    claim = f"**{c.id}** ({c.section}): {c.statement}"
    paper = c.paper_value + (f" [{c.paper_regime}]" if c.paper_regime and c.kind == "empirical" else "")
    record = r.record if r.record == "none" else f"{r.record}, {r.seeds} seeds × {r.pt_replicates} PT"
    if c.context:
        record += "; shown beside it, not deciding it: " + ", ".join(c.context)
    if c.accelerator:
        record += f"; more seeds sized for an accelerator: `{c.accelerator}`"
    command = f"`{c.command}`" if c.command else ""
    return "| " + " | ".join(_md(x) for x in (claim, paper, j.ours, r.regime, f"**{j.verdict}**", j.reason,
                                               record, command)) + " |"


def to_markdown(rows: Sequence[Row]) -> str:
    """A GitHub Markdown table, one row per claim (:data:`MD_HEAD`)."""
    lines = ["| " + " | ".join(MD_HEAD) + " |", "|" + "---|" * len(MD_HEAD)]
    return "\n".join(lines + [_md_row(r) for r in rows])


def to_json(rows: Sequence[Row]) -> str:
    return json.dumps([r.to_json() for r in rows], ensure_ascii=False, indent=1, allow_nan=False)


def to_latex(rows: Sequence[Row]) -> str:
    """A ``longtable`` (booktabs rules): claim, the paper, ours, verdict, record."""
    lines = [r"\begin{longtable}{p{0.3\linewidth}p{0.2\linewidth}p{0.2\linewidth}ll}", r"\toprule",
             r"claim & the paper & ours & verdict & record \\", r"\midrule"]
    lines += [" & ".join(latex_escape(x) for x in (f"{r.claim.id}: {r.claim.statement}", r.claim.paper_value,
                                                   r.judgement.ours, r.judgement.verdict, r.record)) + r" \\"
              for r in rows]
    return "\n".join(lines + [r"\bottomrule", r"\end{longtable}"])


def summary_markdown(rows: Sequence[Row]) -> str:
    """Per paper and kind, the count of each verdict; then the headline claims with verdict and reason."""
    head = ["paper", "kind", *VERDICTS, "records produced / transcribed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for paper in PAPERS:
        for kind in ("empirical", "lemma"):
            mine = [r for r in rows if r.claim.paper == paper and r.claim.kind == kind]
            if not mine:
                continue
            n = counts(mine)
            prod = sum(r.record == "produced" for r in mine)
            trans = sum(r.record == "transcribed" for r in mine)
            lines.append("| " + " | ".join([PAPER_TITLES[paper], kind, *(str(n[v]) for v in VERDICTS),
                                             f"{prod} / {trans}"]) + " |")
    heads = [r for r in rows if r.claim.headline]
    if heads:
        lines += ["", "Headline findings:", ""]
        lines += [f"- **{r.judgement.verdict}** — {_md(r.claim.statement)} (`{r.claim.id}`, {r.seeds} seeds × "
                  f"{r.pt_replicates} PT models, {r.record}): {_md(r.judgement.reason)}" for r in heads]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------- blocks

BLOCK = re.compile(r"<!-- claims:(?P<spec>[^>]*?) -->\n(?P<body>.*?)<!-- /claims -->", re.S)


def _value(text: str):
    """A KEY=VALUE selection value: an integer or a number where it reads as one, else the string."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def record_markdown(rec: Record, by: Sequence[str], metrics: Sequence[str],
                    where: Mapping[str, Any] | None = None) -> str:
    """A record's runs per value of the factors ``by``: runs (PT models × seeds), then per metric ``mean (lo–hi)``
    over every run and, with two or more PT models, ``PT m1 / m2 …`` (each PT model's mean, in label order); one
    decimal, three for a metric whose values are all fractions (below 2 in size).

    Raises:
      ClaimsError: no row selected, or no selected row has a metric (names the record).
    """
    selected = rec.select(**(where or {}))
    if not selected:
        raise ClaimsError(f"record {rec.name}: no row where {dict(where or {})}")
    for m in metrics:
        if not any(r.get(m) is not None for r in selected):
            raise ClaimsError(f"record {rec.name}: no selected row has {m!r}")
    # one decimal for values on the ×100 scale, three for fractions (every |value| of the column below 2)
    digits = {m: 3 if all(abs(float(r[m])) < 2 for r in selected if r.get(m) is not None) else 1 for m in metrics}
    stats = {(tuple(c.factors.values()), c.metric): c for c in cells(selected, by, metrics)}

    lines = ["| " + " | ".join([", ".join(by), "runs (PT × seeds)", *metrics]) + " |",
             "|" + "---|" * (len(metrics) + 2)]
    for value in dict.fromkeys(tuple(r.get(f) for f in by) for r in selected):
        runs = [r for r in selected if tuple(r.get(f) for f in by) == value]
        pts = sorted({str(r.get("pt")) for r in runs if r.get("pt") is not None})
        seeds = {r.get("seed") for r in runs if r.get("seed") is not None}
        row = [", ".join("–" if v is None else f"{v:g}" if isinstance(v, float) else str(v) for v in value),
               f"{len(runs)} ({len(pts) or 1} × {len(seeds) or 1})"]
        for m in metrics:
            c = stats.get((value, m))
            if c is None:
                row.append("–")
                continue
            d = digits[m]
            s = c.runs
            cell = f"{s.mean:.{d}f}" if s.n == 1 else f"{s.mean:.{d}f} ({s.lo:.{d}f}–{s.hi:.{d}f})"
            if len(pts) > 1:
                by_label = {str(pt): x for pt, x in c.by_pt.items() if pt is not None}
                cell += "; PT " + " / ".join(f"{by_label[pt].mean:.{d}f}" for pt in pts if pt in by_label)
            row.append(cell)
        lines.append("| " + " | ".join(row) + " |")
    prov = rec.provenance
    made = f"`{prov['command']}`" + (f" at {prov['commit']}" if prov.get("commit") else "")
    return "\n".join(lines + ["", f"From `results/{rec.name}.json` ({rec.origin}): {made}."])


def render(spec: str, rows: Sequence[Row], where: str = "",
           records: Mapping[str, Record] | None = None) -> str:
    """The Markdown of one generated block (see the module docstring for ``spec``).

    Raises:
      ClaimsError: an unknown spec, paper, kind, claim id or record (named with ``where``).
    """
    words = spec.split()
    if words and words[0] == "record":
        if len(words) < 4 or any("=" not in w for w in words[4:]):
            raise ClaimsError(f"{where}: block 'claims:{spec}': expected record NAME BY METRIC[,METRIC...] "
                              "[KEY=VALUE ...]")
        if records is None or words[1] not in records:
            raise ClaimsError(f"{where}: block 'claims:{spec}' names no record results/{words[1]}.json")
        sel = {k: [_value(x) for x in v.split("|")] if "|" in v else _value(v)
               for k, v in (w.split("=", 1) for w in words[4:])}
        try:
            return record_markdown(records[words[1]], words[2].split(","), words[3].split(","), sel)
        except ClaimsError as err:
            raise ClaimsError(f"{where}: block 'claims:{spec}': {err}") from err
    if words == ["summary"]:
        return summary_markdown(rows)
    if words and words[0] == "table" and len(words) in (2, 3) and words[1] in PAPERS:
        kind = words[2] if len(words) == 3 else None
        if kind not in (None, "empirical", "lemma"):
            raise ClaimsError(f"{where}: block 'claims:{spec}': kind must be empirical or lemma")
        return to_markdown([r for r in rows if r.claim.paper == words[1] and kind in (None, r.claim.kind)])
    if words and words[0] == "claim" and len(words) > 1:
        by_id = {r.claim.id: r for r in rows}
        unknown = [w for w in words[1:] if w not in by_id]
        if unknown:
            raise ClaimsError(f"{where}: block 'claims:{spec}' names no registered claim {', '.join(unknown)}")
        return to_markdown([by_id[w] for w in words[1:]])
    raise ClaimsError(f"{where}: unknown generated block 'claims:{spec}' (summary | table PAPER [KIND] | "
                      "claim ID ... | record NAME BY METRICS [KEY=VALUE ...])")


def _blocks(text: str, rows: Sequence[Row], name: str, records: Mapping[str, Record] | None):
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        yield m, line, render(m.group("spec").strip(), rows, f"{name}, line {line}", records) + "\n"


def doc_files(root: str | pathlib.Path) -> list[pathlib.Path]:
    """README.md and every Markdown file under docs/."""
    root = pathlib.Path(root)
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]


def check_docs(root: str | pathlib.Path, rows: Sequence[Row],
               records: Mapping[str, Record] | None = None) -> list[str]:
    """One message per generated block that differs from the records (file, line, block), [] when all agree."""
    problems = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        for m, line, body in _blocks(text, rows, str(path), records):
            if m.group("body") != body:
                problems.append(f"{path}, line {line}: generated block 'claims:{m.group('spec').strip()}' differs "
                                "from what the records give (run `cfka claims --write-docs`)")
    return problems


def write_docs(root: str | pathlib.Path, rows: Sequence[Row],
               records: Mapping[str, Record] | None = None) -> list[pathlib.Path]:
    """Rewrites every generated block from the records; returns the files that changed."""
    from cfka_jax.jsonio import write_text_atomic

    changed = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        new, pos = [], 0
        for m, _line, body in _blocks(text, rows, str(path), records):
            new += [text[pos:m.start("body")], body]
            pos = m.end("body")
        new.append(text[pos:])
        out = "".join(new)
        if out != text:
            write_text_atomic(path, out)
            changed.append(path)
    return changed
