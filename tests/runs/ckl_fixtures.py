"""Fixtures in the real files' exact layouts (spec taalm.md §5.1, §5.2, §8), written by the tests: a LAMA-CKL
folder (``variant.jsonl``, ``invariant_descriptive.jsonl``, ``invariant_schematic.jsonl``, the TA file), a
TemporalWiki folder (``eval/*_{changed,unchanged}.jsonl``, ``train/diffset_*_filtered.jsonl`` or the diff-set
CSVs, TA rows), and a tiny random-init HF Qwen2 folder whose byte-level BPE tokenizer is trained on that text."""

from __future__ import annotations

import csv
import json
import pathlib

SUBJECTS = ("Libya", "Moravia", "Tessaly", "Orvieto Labs", "Karl Brenner", "Anu Patel", "Velmora", "Hugo Sand",
            "Corvin Press", "Isla Ferro", "Dunmore", "Petra Lind")
OBJECTS = ("Brazil", "Danube", "Latin", "Siemens", "physics", "Toronto", "jazz", "Madrid", "Oxford", "cello",
           "Lisbon", "Nokia")
FILLER = ("According to the archive, the record was revised several times during the following decades, "
          "and historians still discuss the details of the early period in local journals.")


def lama_record(i: int, *, invariant: bool, score: float) -> dict:
    """One §5.2 record (the real fields and types; the object occurs in both probes and the evidence)."""
    s, o = SUBJECTS[i % len(SUBJECTS)], OBJECTS[(i * 5 + (3 if invariant else 0)) % len(OBJECTS)]
    label = "official language" if invariant else "diplomatic relation"
    desc = f"The official language of {s} is {o} ." if invariant else f"{s} maintains diplomatic relations with {o} ."
    evidence = f"{s} is a name that appears in many sources. {FILLER} In recent years {s} was linked to {o} by " \
               f"several reports."
    masked = evidence.replace(o, "[MASK]")
    return {"relation_code": "P37" if invariant else "P530", "uuid": f"{'inv' if invariant else 'var'}-{i:04d}",
            "task_descriptive": desc,
            "task_schematic": f"Guess the object. \n  subject is {s} , relation is {label} , object is {o}",
            "subject": s, "object": o, "relation_label": label, "masked_evidence": masked, "evidence": evidence,
            "position": masked.find("[MASK]") / len(masked), "evidence_length": len(evidence),
            "invariant": invariant, "scores": {"descriptive": {"llama_7b": score, "llama_1b": score},
                                               "schematic": {"llama_7b": score, "llama_1b": score}}}


def _jsonl(path: pathlib.Path, rows) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_lama(root: pathlib.Path, n: int = 6, n_ta: int = 10) -> pathlib.Path:
    _jsonl(root / "variant.jsonl", [lama_record(i, invariant=False, score=0.0) for i in range(n)])
    _jsonl(root / "invariant_descriptive.jsonl", [lama_record(i, invariant=True, score=1.0) for i in range(n)])
    _jsonl(root / "invariant_schematic.jsonl", [lama_record(i + n, invariant=True, score=1.0) for i in range(n)])
    ta = [dict(lama_record(i + 2 * n, invariant=bool(i % 2), score=0.25), uuid=f"ta-{i:04d}") for i in range(n_ta)]
    _jsonl(root / "train_attention_traindata.jsonl", ta)
    return root


def twiki_text(i: int) -> str:
    s, o = SUBJECTS[i % len(SUBJECTS)], OBJECTS[(i * 7) % len(OBJECTS)]
    return f"{s} moved its main office to {o} in the new year. {FILLER}"


def write_twiki(root: pathlib.Path, n: int = 4, *, csv_streams: bool = False) -> pathlib.Path:
    from cfka_jax.data.temporalwiki import PERIODS, PROBE_PERIODS

    for k, (d, p) in enumerate(zip(PERIODS, PROBE_PERIODS)):
        texts = [twiki_text(k * n + i) for i in range(n)]
        if csv_streams:
            path = root / "TWiki_Diffsets" / f"wikipedia_{d}_gpt2.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(["text"])
                for t in [*texts, "too short"]:  # the reference's filter drops the short row
                    w.writerow([t])
        else:
            _jsonl(root / "train" / f"diffset_{d}_filtered.jsonl", [{"text": t} for t in texts])
        changed = [{"subject": SUBJECTS[(k * n + i) % 12], "relation": "headquarters location",
                    "object": OBJECTS[((k * n + i) * 7) % 12]} for i in range(n)]
        unchanged = [{"subject": SUBJECTS[(i + 5) % 12], "relation": "country", "object": OBJECTS[(i + 2) % 12]}
                     for i in range(n)]
        _jsonl(root / "eval" / f"{p}_changed.jsonl", changed)
        _jsonl(root / "eval" / f"{p}_unchanged.jsonl", unchanged)
    ta = [{"text": twiki_text(i + 40), "subject": SUBJECTS[(i + 40) % 12], "relation": "headquarters location",
           "object": OBJECTS[((i + 40) * 7) % 12]} for i in range(10)]
    _jsonl(root / "train_TA" / "train_attention_traindata_0809.jsonl", ta)
    return root


def corpus() -> list[str]:
    texts = [lama_record(i, invariant=inv, score=0.0)[k] for i in range(30) for inv in (False, True)
             for k in ("evidence", "task_descriptive", "task_schematic")]
    return texts + [twiki_text(i) for i in range(60)] + [f"{s} {o} country headquarters location"
                                                         for s in SUBJECTS for o in OBJECTS]


def write_tokenizer(folder: pathlib.Path, *, vocab: int = 320, extra: str = ""):
    """A byte-level BPE tokenizer trained on the fixture text (``extra`` changes the training text, hence the
    merges, for a tokenizer that differs)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus() + ([extra] * 50 if extra else []),
                            trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    return fast


def write_tiny_qwen(folder: pathlib.Path, *, hidden: int = 16, layers: int = 2, seed: int = 0,
                    tokenizer_extra: str = "") -> pathlib.Path:
    """A random-init HF Qwen2 folder (config.json, safetensors, tokenizer) built with transformers."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = write_tokenizer(folder, extra=tokenizer_extra)
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden + 6,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=512, tie_word_embeddings=True, eos_token_id=tok.eos_token_id)
    Qwen2ForCausalLM(cfg).save_pretrained(folder)
    return folder


def write_tiny_llama(folder: pathlib.Path, *, hidden: int = 16, layers: int = 2, seed: int = 0) -> pathlib.Path:
    """A random-init HF Llama folder (the paper's family) with the fixture tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = write_tokenizer(folder)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden + 6,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=512, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder
