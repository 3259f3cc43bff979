"""The verdict rules of the token-force paper's transmission and reset claims (§7), on the produced record of the
out-of-domain study (``cfka geometry transmission --world ood --seeds 0,1,2 --record transmission_ood``); the reset
gain also reads the Biography record (``cfka geometry transmission --seeds 0,1,2 --record transmission_biography``;
its 3-seed study is sized for an accelerator, so the record here is the transcribed one-seed run, in the same
columns: its ``sft`` rows are means over the five tasks where the produced ones have one row per task).

The OOD record holds one row per (seed, task D, CPT checkpoint c, reset): R and R / readout size on D's own probe
and on ``bio`` at c before any SFT, D's probe accuracy at the base model (``base_acc``) and its position-only chance,
and the SFT outcome from c under the reset. The rules derive (spec §7.5):

* **the premise**: task D counts at a seed only where the base model knows it before CPT,
  ``base_acc ≥ chance + 0.5 · (1 − chance)`` (``geometry.plasticity.knows_task``); a task that fails it is left
  out and named in the verdict's reason;
* **the drop** ``ΔR(D, c) = (R_D(base) − R_D(c)) / R_D(base)`` on the size-normalised R (``r_norm``; the raw R's
  numbers are shown beside it), **the gain** ``L_final(c, none) − L_final(c, reset)``;
* **ρ_task**: Spearman of drop vs gain over a seed's points (D, c ≠ base), one value per seed; a seed is one run.

The spread rule (``token_force_rules``: values of ≥ 2 runs all on one side of 0) decides, and a verdict stronger
than ``partly`` / ``not reproduced`` needs at least :data:`MIN_SEEDS` seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cfka_jax.claims.results import Record
from cfka_jax.claims.verdicts import Judgement, gap, not_tested, paired
from cfka_jax.claims.papers import token_force_rules as r

MIN_SEEDS = r.MIN_SEEDS
PAPER_RHO = 0.73
"""The paper's out-of-domain Spearman ρ (§7.5)."""


def premise(ood: Record) -> dict[tuple[int, str], tuple[float, float, bool]]:
    """``{(seed, task): (base accuracy, chance, knows)}`` from the base rows (``cpt_step`` 0)."""
    from cfka_jax.geometry.plasticity import knows_task

    out = {}
    for row in ood.select(cpt_step=0, reset="none"):
        acc, chance = float(row["base_acc"]), float(row["chance"])
        out[(int(row["seed"]), row["task"])] = (acc, chance, knows_task(acc, chance))
    return out


def _cell(ood: Record, seed: int, task: str, step: int, reset: str) -> Mapping:
    rows = ood.select(seed=seed, task=task, cpt_step=step, reset=reset)
    if len(rows) != 1:
        raise ValueError(f"record {ood.name}: {len(rows)} rows for seed {seed}, task {task}, step {step}, reset "
                         f"{reset}; expected one")
    return rows[0]


def steps(ood: Record) -> list[int]:
    """The CPT checkpoints c ≠ base of the record."""
    return sorted({int(row["cpt_step"]) for row in ood.rows} - {0})


def drop(ood: Record, seed: int, task: str, step: int, key: str = "r_norm") -> float:
    """``(R(base) − R(c)) / R(base)`` of ``key`` (``r_norm``, ``r``, ``r_bio_norm``, ``r_bio``)."""
    base = float(_cell(ood, seed, task, 0, "none")[key])
    return (base - float(_cell(ood, seed, task, step, "none")[key])) / base


def gain(ood: Record, seed: int, task: str, step: int, reset: str, loss: str = "l_final") -> float:
    return float(_cell(ood, seed, task, step, "none")[loss]) - float(_cell(ood, seed, task, step, reset)[loss])


def known(ood: Record) -> dict[int, list[str]]:
    """The tasks that pass the premise, per seed (every seed of the record, possibly with none)."""
    p = premise(ood)
    return {s: [t for (s2, t), v in sorted(p.items()) if s2 == s and v[2]] for s in sorted({s for s, _ in p})}


def rho_task(ood: Record, seed: int, tasks: Sequence[str], *, key: str = "r_norm", reset: str = "readout") -> float:
    """Spearman of drop vs gain over the seed's points (D in ``tasks``, c ≠ base); NaN with < 3 points."""
    from cfka_jax.theory.stats import spearman64

    pts = [(drop(ood, seed, d, c, key), gain(ood, seed, d, c, reset)) for d in tasks for c in steps(ood)]
    if len(pts) < 3:
        return float("nan")
    return spearman64([x for x, _ in pts], [y for _, y in pts])


def left_out(ood: Record) -> str:
    """The tasks the premise leaves out, with their accuracy and chance (empty when none)."""
    p = premise(ood)
    bad = {}
    for (s, t), (acc, chance, ok) in sorted(p.items()):
        if not ok:
            bad.setdefault(t, []).append(f"{acc:.2f}/{chance:.2f}@{s}")
    return "; ".join(f"{t} left out (base accuracy / chance at seed: {', '.join(v)})" for t, v in bad.items())


def _fmt(vals: Sequence[float]) -> str:
    return " / ".join(f"{v:+.2f}" for v in vals)


def ood_world(rule):
    """``rule`` judged on the out-of-domain study whose base model knows every task (:data:`r.T_OOD_KNOWN`) where
    that record is present, the default world's study (:data:`r.T_OOD`, only longform known) shown beside it (a
    context record); else on the default world's study."""
    def judged(records: Mapping[str, Record]) -> Judgement:
        if r.T_OOD_KNOWN not in records:
            return rule(records)
        rest = {k: v for k, v in records.items() if k not in (r.T_OOD, r.T_OOD_KNOWN)}
        j = rule({**rest, r.T_OOD: records[r.T_OOD_KNOWN]})
        if r.T_OOD not in records:
            return j
        d = rule({**rest, r.T_OOD: records[r.T_OOD]})
        return Judgement(j.verdict, f"{j.reason}; the default OOD world (identification tasks unlearned): "
                                    f"{d.verdict}, {d.ours}", j.ours)
    judged.__doc__ = rule.__doc__
    return judged


def transmission(records: Mapping[str, Record]) -> Judgement:
    """ρ_task (drop of R / readout size vs the Reset-readout gain) > 0 at every seed, ≥ the paper's 0.73 to hold."""
    ood = records[r.T_OOD]
    tasks = {s: t for s, t in known(ood).items() if t}
    if not tasks:
        return not_tested("no out-of-domain task passes the premise (base accuracy well above chance) at any seed: "
                          + left_out(ood))
    norm = [rho_task(ood, s, t) for s, t in tasks.items()]
    raw = [rho_task(ood, s, t, key="r") for s, t in tasks.items()]
    bio_rho = [rho_task(ood, s, t, key="r_bio_norm") for s, t in tasks.items()]
    used = ", ".join(sorted({t for ts in tasks.values() for t in ts}))
    ours = (f"ρ_task at seeds {', '.join(map(str, tasks))} (tasks {used}; Reset readout, L_final): R/size "
            f"{_fmt(norm)}, raw R {_fmt(raw)}; ρ_bio (in-domain drop, R/size) {_fmt(bio_rho)}")
    note = "; ".join(x for x in (left_out(ood), f"raw R: ρ_task {_fmt(raw)}") if x)
    c = r.vs_values("ρ_task per seed", norm, 0.0)
    if c.state == "apart" and c.diff > 0:
        j = Judgement("holds" if min(norm) >= PAPER_RHO else "partly",
                      f"ρ_task > 0 at every seed, lowest {min(norm):+.2f} vs the paper's {PAPER_RHO}; " + note, ours)
    elif c.state == "apart":
        j = Judgement("refuted", f"ρ_task < 0 at every seed ({_fmt(norm)}); " + note, ours)
    elif c.state == "one run" and c.diff > 0:
        j = Judgement("partly", f"ρ_task {_fmt(norm)} at one seed: the paper's sign, spread unknown; " + note, ours)
    elif c.state == "one run":
        j = Judgement("not reproduced", f"ρ_task {_fmt(norm)} at one seed: not the paper's sign; " + note, ours)
    else:
        j = Judgement("not reproduced", f"ρ_task changes sign across seeds ({_fmt(norm)}); " + note, ours)
    return r.capped(j, len(norm))


def transmission_drop(records: Mapping[str, Record]) -> Judgement:
    """ΔR of R / readout size > 0 at the last checkpoint on every known task's probe, at every seed."""
    ood = records[r.T_OOD]
    tasks = known(ood)
    names = sorted({t for ts in tasks.values() for t in ts})
    if not names:
        return not_tested("no out-of-domain task passes the premise at any seed: " + left_out(ood))
    last = steps(ood)[-1]
    cmps, raw = [], []
    for t in names:
        seeds = [s for s, ts in tasks.items() if t in ts]
        cmps.append(r.vs_values(f"ΔR/size {t} at step {last}", [drop(ood, s, t, last) for s in seeds], 0.0))
        raw.append(f"{t} {_fmt([drop(ood, s, t, last, 'r') for s in seeds])}")
    indomain = _fmt([drop(ood, s, names[0], last, "r_bio_norm") for s in sorted(tasks)])  # bio: any task's rows
    j = r.overall(cmps, "CPT lowers R / readout size on the out-of-domain task probes (ΔR > 0)",
                  f"raw R: ΔR {'; '.join(raw)}; in domain (bio) ΔR/size {indomain}"
                  + (f"; {left_out(ood)}" if left_out(ood) else ""))
    return r.capped(j, len(tasks))


def bio_losses(bio: Record, reset: str = "readout") -> tuple[int, dict[str, dict[int, float]]]:
    """(the last CPT checkpoint of the Biography record's ``sft`` rows, ``{reset: {seed: l_final}}`` there for
    ``none`` and ``reset``), ``l_final`` the mean over the seed's tasks (a transcribed row is already that mean).

    Raises:
      ValueError: a seed lacks one of the two resets at the last checkpoint or holds them on different tasks
        (names the record and the seed).
    """
    sft = bio.select(kind="sft")
    if not sft:
        raise ValueError(f"record {bio.name}: no row of kind 'sft'")
    last = max(int(row["cpt_step"]) for row in sft)
    out: dict[str, dict[int, float]] = {}
    tasks: dict[tuple[str, int], list] = {}
    for x in ("none", reset):
        for row in bio.select(kind="sft", cpt_step=last, reset=x):
            tasks.setdefault((x, int(row["seed"])), []).append(row.get("task"))
            out.setdefault(x, {}).setdefault(int(row["seed"]), []).append(float(row["l_final"]))
    seeds = sorted({s for _, s in tasks})
    if not seeds:
        raise ValueError(f"record {bio.name}: no 'sft' row of reset 'none' or {reset!r} at CPT step {last}")
    for s in seeds:
        a, b = tasks.get(("none", s)), tasks.get((reset, s))
        if a is None or b is None or sorted(a, key=str) != sorted(b, key=str):
            raise ValueError(f"record {bio.name}: seed {s} at CPT step {last} holds reset 'none' on tasks {a} and "
                             f"{reset!r} on {b}; the gain needs both on the same tasks")
    return last, {x: {s: sum(v) / len(v) for s, v in sorted(by.items())} for x, by in out.items()}


def bio_gain(bio: Record) -> tuple[r.Cmp, int]:
    """The Biography record's comparison (and its seeds): with ≥ :data:`MIN_SEEDS` seeds the per-seed gain
    ``L_final(none) − L_final(readout)`` at the last checkpoint, apart only when every seed has it (paired by
    seed); with fewer, the two resets' seeds as two sides (one transcribed seed: one run a side)."""
    last, loss = bio_losses(bio)
    seeds = sorted(loss["none"])
    if len(seeds) >= MIN_SEEDS:
        rows = [{"seed": s, "reset": x, "l_final": loss[x][s]} for x in ("none", "readout") for s in seeds]
        return r.vs_runs(f"Biography gain (readout, mean over the tasks) per seed at step {last}",
                         paired(rows, "l_final", {"reset": "none"}, {"reset": "readout"}, by=("seed",))), len(seeds)
    return r.vs_runs(f"Biography gain (readout) at step {last}",
                     gap([loss["none"][s] for s in seeds], [loss["readout"][s] for s in seeds])), len(seeds)


def reset_gain(records: Mapping[str, Record]) -> Judgement:
    """The gain of Reset readout (and Reset last 4 = ``last4`` where run) > 0 at the last checkpoint on every known
    out-of-domain task at every seed (the paper's regime: SFT tasks outside the CPT domain). The Biography study
    (in domain, a context record) is shown beside it; it joins the verdict (:func:`bio_gain`: at every seed) only
    once it holds ≥ :data:`MIN_SEEDS` seeds."""
    ood, bio = records[r.T_OOD], records.get(r.T_BIO)
    tasks = known(ood)
    names = sorted({t for ts in tasks.values() for t in ts})
    if not names:
        return not_tested("no out-of-domain task passes the premise at any seed: " + left_out(ood))
    last = steps(ood)[-1]
    resets = [x for x in ("readout", "last4") if ood.select(reset=x)]
    cmps = []
    for reset in resets:
        for t in names:
            seeds = [s for s, ts in tasks.items() if t in ts]
            cmps.append(r.vs_values(f"OOD gain {reset} {t} at step {last}",
                                    [gain(ood, s, t, last, reset) for s in seeds], 0.0))
    bio_note = ""
    if bio is not None:
        bio_cmp, bio_seeds = bio_gain(bio)
        if bio_seeds >= MIN_SEEDS:
            cmps.append(bio_cmp)
        else:
            bio_note = (f"; not deciding it (in domain, {bio_seeds} seed{'s' if bio_seeds != 1 else ''}): "
                        f"{bio_cmp.shown}")
    l0 = {x: _fmt([float(_cell(ood, s, t, last, x)["l0"]) for t in names for s in sorted(tasks) if t in tasks[s]])
          for x in ("none", *resets)}
    note = ("L0 before SFT at the last checkpoint: " + ", ".join(f"{k} {v}" for k, v in l0.items())
            + (f"; {left_out(ood)}" if left_out(ood) else "") + bio_note)
    return r.capped(r.overall(cmps, "a reset to the base weights lowers the post-SFT probe loss after CPT", note),
                   len(tasks))


def loop(records: Mapping[str, Record]) -> Judgement:
    """The self-reinforcing loop (``loop_ood``): over rounds 1..K of (CPT block, SFT), per seed,

    * the premise, R / readout size on the task's probe before the SFT falls: ``R(1) − R(K) > 0``;
    * plasticity keeps falling: the SFT ends at a higher probe loss, ``L_final(K) − L_final(1) > 0``;
    * the SFT rounds reinforce it: the loop ends its round-K SFT above the CPT-only line (same CPT blocks and
      batches, no SFT in between), ``L_final(K, loop) − L_final(K, cpt_only) > 0``.

    The two plasticity comparisons decide (the spread rule: every seed on one side of 0): both in the direction,
    holds; both the other way, refuted; the rest not reproduced, unless one is in the direction beyond the spread
    (partly). The premise is shown in the reason; without it the loop is not tested. Below :data:`MIN_SEEDS` seeds
    the verdict stops at partly / not reproduced."""
    rec = records[r.LOOP]
    seeds = sorted({row["seed"] for row in rec.rows})
    last = max(row["round"] for row in rec.rows)

    def at(seed, rnd, line, metric):
        return r._one(rec, metric, seed=seed, round=rnd, line=line)

    fall = r.vs_values(f"R/size before SFT, round 1 − round {last} (loop)",
                       [at(s, 1, "loop", "r_norm") - at(s, last, "loop", "r_norm") for s in seeds], 0.0)
    worse = r.vs_values(f"L_final round {last} − round 1 (loop)",
                        [at(s, last, "loop", "l_final") - at(s, 1, "loop", "l_final") for s in seeds], 0.0, digits=3)
    vs_cpt = r.vs_values(f"L_final round {last}, loop − CPT only",
                         [at(s, last, "loop", "l_final") - at(s, last, "cpt_only", "l_final") for s in seeds], 0.0,
                         digits=3)
    cpt_r = " / ".join(f"{at(s, 1, 'cpt_only', 'r_norm'):.2f} → {at(s, last, 'cpt_only', 'r_norm'):.2f}" for s in seeds)
    note = (f"premise {fall.shown}; the CPT-only line's R/size round 1 → {last}: {cpt_r}; L0 before the SFT (loop) "
            + " / ".join(f"{at(s, 1, 'loop', 'l0'):.2f} → {at(s, last, 'loop', 'l0'):.2f}" for s in seeds))
    if not (fall.state == "apart" and fall.diff > 0):
        return not_tested("the loop does not lower R / readout size at every seed (the premise): " + note)
    cmps = [worse, vs_cpt]
    ours = "; ".join(c.shown for c in cmps)
    claim = "plasticity falls round over round and more than under CPT alone"
    up = [c for c in cmps if c.state == "apart" and c.diff > 0]
    down = [c for c in cmps if c.state == "apart" and c.diff < 0]
    if len(up) == len(cmps):
        j = Judgement("holds", f"{claim}: beyond the spread in both comparisons ({note})", ours)
    elif len(down) == len(cmps):
        j = Judgement("refuted", f"{claim}: the other way round in both comparisons ({note})", ours)
    elif up:
        j = Judgement("partly", f"{claim}: beyond the spread in {len(up)} of 2 comparisons ({note})", ours)
    else:
        what = ", ".join(f"{c.label} " + (("below" if c.diff < 0 else "above") + " 0 at every seed"
                                          if c.state == "apart" else r.POINT_STATES[c.state].format(p="0"))
                         for c in cmps)
        j = Judgement("not reproduced", f"{claim}: not in the paper's direction beyond the spread ({what}; {note})",
                      ours)
    return r.capped(j, len(seeds))
