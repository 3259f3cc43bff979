"""LAMA-CKL: the record format and its reader, and a synthetic LAMA-CKL built from the Biography world
(spec taalm.md §5.1–§5.3).

Real files (``variant.jsonl`` = TO-LEARN, ``invariant_descriptive.jsonl`` = NOT-TO-FORGET,
``train_attention_traindata.jsonl`` = meta-training pairs) are JSONL with the §5.2 fields; :func:`read_lama_ckl`
checks every line and names the file and line of the first bad record. The project ships loaders, not the data.

Synthetic LAMA-CKL (:func:`build_synthetic_world` then :func:`select_ckl`): people of a Biography world get a
residence city (the world has none) and the PT corpus holds their biographies, their facts in the descriptive
and schematic probe forms and, for a ``pt_changed`` group, the evidence of a change and its new facts (so θ0 has
seen how a change reads). Disjoint groups of *other* people get a time-variant change (new employer or new
residence, the object never seen in PT) written as a biography-style evidence paragraph: a known intro sentence,
the change sentence (the new object exactly once, after a space), and ``distractors`` sentences of random
details (new names, dates, companies), so that, as in real evidence, most tokens are not about the fact.
Selection by θ0's §5.5 scores (the caller scores, e.g. with ``eval.knowledge_probes``): TO-LEARN = changed facts
θ0 scores 0 on in both forms; NOT-TO-FORGET = invariant facts (birthplace, university, major) θ0 scores 1 on in
the descriptive form; TA train = changed facts of the meta-training group with both scores < 0.5. The three
sets share no person. Every record keeps θ0's scores under ``scores.{descriptive,schematic}.theta0``.
"""

from __future__ import annotations

import dataclasses
import os

from cfka_jax.data import _ckl_templates as T
from cfka_jax.data.io import iter_jsonl
from cfka_jax.jsonio import write_jsonl_atomic
from cfka_jax.values import check_float, check_int, check_sizes

_STR = ("relation_code", "uuid", "task_descriptive", "task_schematic", "subject", "object", "relation_label",
        "masked_evidence", "evidence")


@dataclasses.dataclass(frozen=True)
class LamaRecord:
    """One LAMA-CKL fact (§5.2 fields)."""

    relation_code: str
    uuid: str
    task_descriptive: str
    task_schematic: str
    subject: str
    object: str
    relation_label: str
    masked_evidence: str
    evidence: str
    position: float
    evidence_length: int
    invariant: bool
    scores: dict

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_scores(scores, where: str) -> None:
    if not isinstance(scores, dict):
        raise ValueError(f"{where}: 'scores' must be an object, got {type(scores).__name__}")
    for form in ("descriptive", "schematic"):
        per_model = scores.get(form)
        if not isinstance(per_model, dict):
            raise ValueError(f"{where}: 'scores.{form}' must be an object of model -> score")
        for model, v in per_model.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{where}: 'scores.{form}.{model}' must be a number in [0, 1], got {v!r}")


def parse_record(rec: dict, where: str) -> LamaRecord:
    """A validated :class:`LamaRecord` from a JSON object.

    Raises:
        ValueError: a missing or mistyped field, an empty subject/object/evidence, an object that does not
            occur in a probe or the evidence, or malformed scores; the message starts with ``where``.
    """
    missing = [k for k in (*_STR, "position", "evidence_length", "invariant", "scores") if k not in rec]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}")
    for k in _STR:
        if not isinstance(rec[k], str):
            raise ValueError(f"{where}: field {k!r} must be a string, got {type(rec[k]).__name__}")
    for k in ("subject", "object", "evidence"):
        if not rec[k].strip():
            raise ValueError(f"{where}: field {k!r} is empty")
    check_float(rec["position"], "field 'position'", lo=0.0, hi=1.0, where=where)
    check_int(rec["evidence_length"], "field 'evidence_length'", lo=1, where=where)
    if not isinstance(rec["invariant"], bool):
        raise ValueError(f"{where}: field 'invariant' must be true or false, got {rec['invariant']!r}")
    for k in ("task_descriptive", "task_schematic", "evidence"):
        if rec["object"] not in rec[k]:
            raise ValueError(f"{where}: the object {rec['object']!r} does not occur in {k!r}")
    _check_scores(rec["scores"], where)
    return LamaRecord(**{f.name: rec[f.name] for f in dataclasses.fields(LamaRecord)})


def read_lama_ckl(path: str | os.PathLike) -> tuple[LamaRecord, ...]:
    """Read and validate a LAMA-CKL JSONL file (also the TA training file, same fields).

    Raises:
        ValueError: invalid JSON, a bad record (:func:`parse_record`), a repeated uuid, naming file and line, or
            a file without records (an empty evaluation set would report a metric over nothing).
    """
    out, seen = [], {}
    for where, rec in iter_jsonl(path):
        r = parse_record(rec, where)
        if r.uuid in seen:
            raise ValueError(f"{where}: uuid {r.uuid!r} repeats {seen[r.uuid]}")
        seen[r.uuid] = where
        out.append(r)
    if not out:
        raise ValueError(f"{os.fspath(path)}: no LAMA-CKL records (an empty file); a set with nothing to score is "
                         f"refused")
    return tuple(out)


def write_lama_ckl(path: str | os.PathLike, records) -> None:
    """Write records as JSONL, atomically (``jsonio.write_jsonl_atomic``)."""
    write_jsonl_atomic(path, (r.as_dict() for r in records), ensure_ascii=False)


def schematic_probe(subject: str, relation_label: str, obj: str) -> str:
    """The §4.1 schematic template filled in."""
    return T.SCHEMATIC.format(subject=subject, relation=relation_label, object=obj)


def descriptive_probe(relation: str, subject: str, obj: str) -> str:
    return T.RELATIONS[relation][2].replace("[X]", subject).replace("[Y]", obj)


def make_record(relation: str, uuid: str, subject: str, obj: str, evidence: str, *, invariant: bool,
                scores: dict | None = None) -> LamaRecord:
    """A record with the derived fields (masked evidence, [MASK] position, evidence length)."""
    code, label, _ = T.RELATIONS[relation]
    masked = evidence.replace(obj, "[MASK]")
    return LamaRecord(code, uuid, descriptive_probe(relation, subject, obj), schematic_probe(subject, label, obj),
                      subject, obj, label, masked, evidence, masked.find("[MASK]") / len(masked), len(evidence),
                      invariant, scores or {"descriptive": {}, "schematic": {}})


# ------------------------------------------------------------------------------------------------ synthetic


@dataclasses.dataclass(frozen=True)
class SyntheticCKLConfig:
    """Sizes of the synthetic world: person groups (disjoint, in the order of the fields ``pt_changed`` …
    ``other``), set sizes and evidence shape."""

    pt_changed: int = 60
    """People whose change (evidence + new facts) is part of the PT corpus."""
    to_learn_pool: int = 120
    """People behind the TO-LEARN set."""
    ta_pool: int = 160
    """People behind the TA pairs (one change per relation of ``change_relations`` each)."""
    twiki_pool: int = 120
    """People behind the TemporalWiki periods."""
    other: int = 40
    """Extra NOT-TO-FORGET candidates."""
    to_learn: int = 100
    """Size of the TO-LEARN set (taken from the scored candidates)."""
    not_to_forget: int = 100
    """Size of the NOT-TO-FORGET set (taken from the scored candidates)."""
    bios_per_person: int = 2
    """Biographies per person in the PT corpus."""
    distractors: int = 3
    """Random-detail sentences per evidence paragraph."""
    name_pool: int = 200
    """First and last names each drawn from the first ``name_pool`` of the project's pools (a smaller
    vocabulary; 26·name_pool² distinct full names)."""
    change_relations: tuple[str, ...] = ("employer",)
    """The time-variant relations that change (``employer``, ``residence``). Default employer only: a new
    residence "City, ST" is never scored 0 by θ0 (the comma and often the state follow from the city, partial
    credit §5.5), so the TO-LEARN and TA rules would reject every residence change."""
    seed: int = 7
    """Seed of the world: people, facts, changes and evidence."""

    def __post_init__(self):
        check_sizes(self, [f.name for f in dataclasses.fields(self) if f.name != "change_relations"], lo=0)
        if self.to_learn > self.to_learn_pool:
            raise ValueError(f"to_learn={self.to_learn} exceeds to_learn_pool={self.to_learn_pool}")
        if self.bios_per_person < 1 or self.name_pool < 1:
            raise ValueError("bios_per_person and name_pool must be >= 1")
        if isinstance(self.change_relations, list):
            object.__setattr__(self, "change_relations", tuple(self.change_relations))
        if not self.change_relations or not set(self.change_relations) <= set(T.VARIANT):
            raise ValueError(f"change_relations must be a non-empty subset of {T.VARIANT}, got {self.change_relations}")

    @property
    def num_people(self) -> int:
        return self.pt_changed + self.to_learn_pool + self.ta_pool + self.twiki_pool + self.other

    def groups(self) -> dict[str, range]:
        out, start = {}, 0
        for name in ("pt_changed", "to_learn_pool", "ta_pool", "twiki_pool", "other"):
            n = getattr(self, name)
            out[name] = range(start, start + n)
            start += n
        return out


@dataclasses.dataclass(frozen=True)
class CKLSets:
    """The three LAMA-CKL files: TO-LEARN (``variant``), NOT-TO-FORGET (``invariant_descriptive``) and the
    Train-Attention pairs (``train_attention_traindata``), plus selection counts."""

    to_learn: tuple[LamaRecord, ...]
    not_to_forget: tuple[LamaRecord, ...]
    ta_train: tuple[LamaRecord, ...]
    stats: dict

    def write(self, folder: str | os.PathLike) -> None:
        os.makedirs(folder, exist_ok=True)
        for name, rows in (("variant", self.to_learn), ("invariant_descriptive", self.not_to_forget),
                           ("train_attention_traindata", self.ta_train)):
            write_lama_ckl(os.path.join(folder, f"{name}.jsonl"), rows)


def _scored(r: LamaRecord, s: dict, model: str) -> LamaRecord:
    return dataclasses.replace(r, scores={"descriptive": {model: float(s["descriptive"])},
                                          "schematic": {model: float(s["schematic"])}})


def select_ckl(world, scores: dict[str, dict], *, model: str = "theta0", strict: bool = True) -> CKLSets:
    """TO-LEARN / NOT-TO-FORGET / TA sets of a synthetic world by θ0's scores (module docstring).

    Args:
        world: a ``ckl_world.SyntheticWorld``.
        scores: uuid → ``{"descriptive": acc, "schematic": acc}`` (§5.5 accuracies of θ0) for every candidate.
        model: the scorer's name stored in the records.
        strict: raise when too few candidates qualify; False tops the sets up with the best-matching rejects
            (lowest TO-LEARN / highest NOT-TO-FORGET scores; counted in ``stats``) — for smoke runs of an
            untrained θ0 only.

    Raises:
        ValueError: a candidate without a score, or fewer qualifying candidates than the configured set size.
    """
    cfg = world.config
    missing = [r.uuid for r in (*world.to_learn_candidates, *world.nf_candidates, *world.ta_candidates)
               if r.uuid not in scores]
    if missing:
        raise ValueError(f"{len(missing)} candidates have no score, e.g. {missing[:3]}")
    sc = lambda r: scores[r.uuid]  # noqa: E731
    to_learn = [r for r in world.to_learn_candidates if sc(r)["descriptive"] == 0 and sc(r)["schematic"] == 0]
    nf = [r for r in world.nf_candidates if sc(r)["descriptive"] == 1]
    ta = [r for r in world.ta_candidates if sc(r)["descriptive"] < 0.5 and sc(r)["schematic"] < 0.5]
    counts = {"to_learn_qualified": len(to_learn), "nf_qualified": len(nf), "ta_qualified": len(ta)}
    short = len(to_learn) < cfg.to_learn or len(nf) < cfg.not_to_forget
    if short and not strict:
        key_tl = lambda r: sc(r)["descriptive"] + sc(r)["schematic"]  # noqa: E731
        to_learn += sorted((r for r in world.to_learn_candidates if r not in to_learn), key=key_tl)
        nf += sorted((r for r in world.nf_candidates if r not in nf), key=lambda r: -sc(r)["descriptive"])
    elif short:
        raise ValueError(f"only {len(to_learn)} TO-LEARN (need {cfg.to_learn}) and {len(nf)} NOT-TO-FORGET "
                         f"(need {cfg.not_to_forget}) candidates qualify; train θ0 longer or enlarge the pools")
    stats = {"to_learn_candidates": len(world.to_learn_candidates), "nf_candidates": len(world.nf_candidates),
             "ta_candidates": len(world.ta_candidates), **counts, "strict": strict}
    pick = lambda rows, n: tuple(_scored(r, sc(r), model) for r in rows[:n])  # noqa: E731
    return CKLSets(pick(to_learn, cfg.to_learn), pick(nf, cfg.not_to_forget), pick(ta, len(ta)), stats)
