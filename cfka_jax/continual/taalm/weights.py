"""φ checkpoints and φ's token weights for any training batch (spec taalm.md §3, §5.4; issue #16 "beyond the
reference": φ's weights as the token weights of any CPT run).

A φ folder holds ``phi.json`` (the body's HF ``config.json`` dict, the :class:`~cfka_jax.continual.taalm.phi.PhiConfig`,
the selected step) and ``params/`` (every parameter of φ, orbax, ``train.checkpoint``). :func:`load_phi` rebuilds
the module from the folder alone. :func:`phi_token_weights` turns a folder into a jitted
``token_weights(batch) -> B S`` for ``train.step.make_train_step(..., loss=Loss(loss_fn=taalm.twppl.twppl_loss))``::

    weights = phi_token_weights("runs/taalm-small/phi")
    batch["token_weights"] = weights(batch)          # tokens, attention_mask / positions / segment_ids if any
    state, metrics = step(state, batch)

φ must share θ's token ids (same tokenizer); :func:`phi_token_weights` checks the vocabulary size when given θ's.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np

from cfka_jax import jsonio, provenance
from cfka_jax.continual.peft import LoRAConfig
from cfka_jax.continual.taalm.phi import PhiConfig, TrainAttention, build_phi, keyed_lora_dropout
from cfka_jax.data.ckl_encode import Encoded, pad_batch
from cfka_jax.eval.batches import row_blocks
from cfka_jax.train import checkpoint

PHI_JSON = "phi.json"


def _body(hf_config: dict):
    from cfka_jax.models import family

    cfg = family.config_from_hf(hf_config)
    return family.of(cfg).build(cfg, seed=0)


def save_phi(folder: str | os.PathLike, phi: TrainAttention, cfg: PhiConfig, *, step: int, extra: dict | None = None,
             made_from: dict | None = None) -> pathlib.Path:
    """Write ``params/`` and then ``phi.json`` (module docstring; ``phi.json`` last and atomically, so a folder with
    one holds a whole φ). ``made_from``: φ's provenance (``cfka_jax.provenance``; at least ``{"tokenizer":
    provenance.tokenizer_fingerprint(tok)}``), which :func:`phi_token_weights` checks."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"body": phi.body.cfg.to_hf_config(), "phi": dataclasses.asdict(cfg), "step": int(step), **(extra or {})}
    if made_from is not None:
        meta[provenance.KEY] = dict(made_from)
    checkpoint.save(folder / "params", {"params": nnx.state(phi, nnx.Param)}, step=step, force=True)
    jsonio.write_json_atomic(folder / PHI_JSON, meta, indent=1, sort_keys=True)
    return folder


def load_phi(folder: str | os.PathLike) -> tuple[TrainAttention, PhiConfig, dict]:
    """(φ, its config, the ``phi.json`` record) from a folder written by :func:`save_phi`.

    Raises:
        ValueError: no ``phi.json``; ``train.checkpoint.CheckpointError`` on mismatched parameters.
    """
    folder = pathlib.Path(folder)
    if not (folder / PHI_JSON).exists():
        raise ValueError(f"{folder}: no {PHI_JSON}; not a φ checkpoint folder")
    meta = jsonio.read_json_object(folder / PHI_JSON, "a φ record (JSON object)")
    for key in ("body", "phi"):
        if not isinstance(meta.get(key), dict):
            raise ValueError(f"{folder / PHI_JSON}: key {key!r} must be an object (a damaged or foreign file)")
    raw = dict(meta["phi"])
    raw["lora"] = None if raw.get("lora") is None else LoRAConfig(**{**raw["lora"], "target_modules": tuple(
        raw["lora"].get("target_modules") or ())})
    cfg = PhiConfig(**raw)
    phi = build_phi(_body(meta["body"]), cfg)
    restored, _ = checkpoint.restore(folder / "params", {"params": nnx.state(phi, nnx.Param)})
    nnx.update(phi, restored["params"])
    return phi, cfg, meta


def phi_token_weights(folder: str | os.PathLike, *, vocab_size: int | None = None, tokenizer=None,
                      flag: str = "--token-weights"):
    """A jitted ``token_weights(batch) -> B S`` (token space, 0 outside ``target_mask`` when the batch has one)
    of the φ saved in ``folder``, in eval mode (no dropout).

    Args:
      vocab_size: θ's vocabulary size (checked when given).
      tokenizer: θ's tokenizer: φ's recorded tokenizer fingerprint must be this one's (a φ of the same size over
        other tokens gives meaningless weights); a φ recording no provenance is refused.
      flag: the option that named ``folder``, for the messages.

    Raises:
      ValueError: another vocabulary size or tokenizer (one line naming ``flag`` and the folder), or an unreadable
        ``phi.json`` (file and line named).
    """
    if tokenizer is not None:  # checked before any parameter is read
        meta = jsonio.read_json_object(pathlib.Path(folder) / PHI_JSON, "a φ record (JSON object)")
        expected = {"tokenizer": provenance.tokenizer_fingerprint(tokenizer)}
        provenance.check_made_from(meta.get(provenance.KEY), expected, flag=flag, folder=folder)
    phi, _, meta = load_phi(folder)
    if vocab_size is not None and meta["body"]["vocab_size"] != vocab_size:
        raise ValueError(f"{flag} {os.fspath(folder)}: φ has vocabulary {meta['body']['vocab_size']}, θ "
                         f"{vocab_size}: token ids must match")
    graphdef, state = nnx.split(phi)

    @jax.jit
    def token_weights(state, batch):
        model = keyed_lora_dropout(nnx.merge(graphdef, state), None)
        w = model(batch["tokens"], positions_BS=batch.get("positions"),
                  attention_mask_BT=batch.get("attention_mask"), segment_ids_BS=batch.get("segment_ids"))
        return w * batch["target_mask"].astype(w.dtype) if "target_mask" in batch else w

    return lambda batch: token_weights(state, batch)


def doc_weights(weights_fn, phi_train, phi_frozen, docs: Encoded, *, batch_size: int = 64) -> tuple[np.ndarray, ...]:
    """φ's weights of every document (token space, one array per document of its own length), in fixed-shape
    batches. ``weights_fn`` is ``phi.make_weights_fn``'s pure function (evaluated without dropout)."""
    fn = jax.jit(lambda train, frozen, batch: weights_fn(train, frozen, batch, None))
    out = []
    for block in row_blocks(len(docs), batch_size):
        batch = pad_batch(docs, block.rows, length=docs.max_len)
        w = np.asarray(fn(phi_train, phi_frozen, {k: jnp.asarray(v) for k, v in batch.items()}))
        out += [w[i, :len(docs.ids[r])] for i, r in enumerate(block.rows[block.valid])]
    return tuple(out)
