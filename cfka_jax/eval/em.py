"""Exact match by generation (spec cfka_stoc.md §5.2; decisions #14, #15; quirks M7–M9).

For each test biography, the five attributes are taken in position order. Attribute a's prompt is the biography's
ids[start:idx_a] with start = previous idx2 + 1 (0 for the first), i.e. the current sentence up to the value; the
answer is decode(ids[idx_a:idx2_a]) without its leading space. The model samples ``max_new_tokens`` tokens at
temperature 0.2 (KV-cached, ``cfka_jax.models.generate``) and a prompt counts as matched when the answer is a
substring of the decoded generation. Prompt forms: ``clean`` (default) decodes the prompt ids as they are;
``code`` reproduces the reference's bug: the full name is replaced by the literal "[Name]" and the full name is
prepended ("Anna B. Smith[Name] was born in"). Prompts that cannot be built (empty) are counted as skipped.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from cfka_jax.eval.batches import row_blocks
from cfka_jax.eval.fta import exact_match
from cfka_jax.data.templates import ATTRIBUTES
from cfka_jax.models.generate import SamplerConfig, generate, pad_prompts


@dataclasses.dataclass(frozen=True)
class EMPrompt:
    prompt_ids: tuple[int, ...]
    answer: str
    attr: int


def em_prompts(split, people, tokenizer, *, form: str = "clean", max_docs: int | None = None) -> tuple[list, int]:
    """(prompts, number skipped) for the documents of a tokenised test split."""
    if form not in ("clean", "code"):
        raise ValueError(f"EM prompt form must be 'clean' or 'code', got {form!r}")
    by_pid = {p.pid: p for p in people}
    prompts, skipped = [], 0
    n = len(split.pid) if max_docs is None else min(max_docs, len(split.pid))
    for i in range(n):
        ids, start = split.doc(i), 0
        for a in np.argsort(split.idx[i], kind="stable"):
            lo, hi = int(split.idx[i, a]), int(split.idx2[i, a])
            prompt = ids[start:lo]
            start = hi + 1
            if len(prompt) == 0:
                skipped += 1
                continue
            if form == "code":
                name = by_pid[int(split.pid[i])].fullname
                text = name + tokenizer.decode(prompt).replace(name, "[Name]")
                prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
            prompts.append(EMPrompt(tuple(int(t) for t in prompt), tokenizer.decode(ids[lo:hi]).strip(), int(a)))
    return prompts, skipped


def exact_match_rate(model, prompts: list, tokenizer, *, key, temperature: float = 0.2, max_new_tokens: int = 32,
                     batch_size: int = 64) -> dict:
    """{'EM', 'EM/<attr>', 'EM_n'}: the fraction of prompts whose answer appears in the sampled continuation."""
    cfg = SamplerConfig(max_new_tokens=max_new_tokens, temperature=temperature, ignore_eos=False,
                        eos_token_id=int(tokenizer.eos_token_id), pad_token_id=int(tokenizer.eos_token_id))
    hits = np.zeros(len(ATTRIBUTES))
    counts = np.zeros(len(ATTRIBUTES))
    if not prompts:
        raise ValueError("exact match needs at least one prompt")
    for lo, block in zip(range(0, len(prompts), batch_size), row_blocks(len(prompts), batch_size)):
        tokens, lengths = pad_prompts([prompts[i].prompt_ids for i in block.rows], int(tokenizer.eos_token_id))
        out = generate(model, tokens, lengths, jax.random.fold_in(key, lo), cfg)
        for i, gen, n in zip(block.rows[block.valid], np.asarray(out.tokens), np.asarray(out.num_tokens)):
            hits[prompts[i].attr] += exact_match(tokenizer.decode(gen[:n]), prompts[i].answer)
            counts[prompts[i].attr] += 1
    res = {f"EM/{a}": float(h / c) if c else 0.0 for a, h, c in zip(ATTRIBUTES, hits, counts)}
    res["EM"] = float(hits.sum() / counts.sum()) if counts.sum() else 0.0
    res["EM_n"] = float(counts.sum())
    return res
