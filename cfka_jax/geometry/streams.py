"""One forward pass that also returns the residual streams the CH2 variants and GH scores read (spec §3.3, §4.1).

For block l = 0 .. L−1 with input ``x_l`` (``x_0`` = the embeddings):

* ``resid_attn[l] = x_l`` — the raw pre-norm residual at the attention input;
* ``norm_attn[l] = input_layernorm(x_l)`` — the normalised attention input, learned γ (and β for LayerNorm);
* ``resid_mlp[l]`` — the raw pre-norm residual at the MLP input: ``x_l + attn_l`` for the sequential residual
  (Qwen), ``x_l`` itself for the parallel residual (Pythia, spec pitfall 24);
* ``norm_mlp[l] = post_attention_layernorm(resid_mlp[l])`` — the MLP input.

A post-norm family (OLMo-2, ``Traits.norm_position == "post"``: ``y = x + n_a(attn(x)); y + n_f(mlp(y))``) has
no norm before its sublayers, so its attention and MLP inputs are the raw residuals: ``norm_attn[l] = x_l`` and
``norm_mlp[l] = resid_mlp[l] = x_l + post_attention_layernorm(attn_l)``.

A hybrid family (Qwen3.5) mixes tokens with a different module per block (``block.mixer()``: ``self_attn`` or a
Gated DeltaNet ``linear_attn``); the linear mixers run from a zero state and are told which tokens are padding, as
in the model call. The streams are the same four per block whatever the mixer.

``final`` is h, the state entering the LM head (after the final norm), and ``logits`` the head output (float32).
The pass reuses the port's own modules (norms, attention, MLP, head) block by block, so its logits equal the
model call's; ``tests/geometry/test_streams.py`` checks that for the families. HF's ``hidden_states[1..L−1]``
(the ``gh_raw`` streams) are ``resid_attn[1:]``.
"""

from __future__ import annotations

import flax.struct
import jax.numpy as jnp

from cfka_jax.geometry.force import wide
from cfka_jax.models import family, layers
from cfka_jax.models.family import Traits
from cfka_jax.shapes import Array, Bool, Float, Int


@flax.struct.dataclass
class Streams:
    """Per-position outputs of :func:`forward_streams` (keyed by the *input* position, not yet shifted).

    Attributes:
        logits: ``[B, S, V]`` float32 (or wider).
        final: ``[B, S, D]`` h, after the final norm.
        resid_attn, resid_mlp, norm_attn, norm_mlp: ``[B, S, L, D]`` (see the module docstring).
    """

    logits: Float[Array, "B S V"]
    final: Float[Array, "B S D"]
    resid_attn: Float[Array, "B S L D"]
    resid_mlp: Float[Array, "B S L D"]
    norm_attn: Float[Array, "B S L D"]
    norm_mlp: Float[Array, "B S L D"]


def _mix(block, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, traits: Traits,
         keep_BS: Bool[Array, "B S"] | None) -> Float[Array, "B S D"]:
    """The block's token mixer on ``x_BSD``: the block's ``mixer()`` where it has one (a hybrid family), else the
    family's attention attribute; a linear-attention mixer gets ``(conv state, delta state, keep)`` = ``(None,
    None, keep_BS)`` (no cache; padding marks), an attention mixer no cache."""
    if hasattr(block, "mixer"):
        mixer = block.mixer()
        cache = (None, None, keep_BS) if getattr(block, "kind", None) == "linear_attention" else None
    else:
        mixer, cache = getattr(block, traits.attn), None
    out_BSD, _, _ = mixer(x_BSD, ctx, cache)
    return out_BSD


def _post_norm_block(block, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, traits: Traits, keep_BS):
    """A post-norm block (OLMo-2): the sublayers read the raw residual, their outputs are normalised."""
    a_out = _mix(block, x_BSD, ctx, traits, keep_BS)
    m_resid = x_BSD + block.post_attention_layernorm(a_out)
    y_BSD = m_resid + block.post_feedforward_layernorm(block.mlp(m_resid))
    return y_BSD, (x_BSD, m_resid, x_BSD, m_resid)


def _block(block, x_BSD: Float[Array, "B S D"], ctx: layers.StepContext, traits: Traits, keep_BS=None):
    """One decoder block of any family, returning its output and its four streams (the attention's attribute,
    the residual form and the norm position from the family's traits)."""
    if traits.norm_position == "post":
        return _post_norm_block(block, x_BSD, ctx, traits, keep_BS)
    a_in = block.input_layernorm(x_BSD)
    a_out = _mix(block, a_in, ctx, traits, keep_BS)
    parallel = traits.parallel_residual
    m_resid = x_BSD if parallel else x_BSD + a_out
    m_in = block.post_attention_layernorm(m_resid)
    m_out = block.mlp(m_in)
    y_BSD = x_BSD + a_out + m_out if parallel else m_resid + m_out
    return y_BSD, (x_BSD, m_resid, a_in, m_in)


def forward_streams(model, tokens_BS: Int[Array, "B S"], *, attention_mask_BS: Int[Array, "B S"] | None = None,
                    positions_BS: Int[Array, "B S"] | None = None) -> Streams:
    """Logits, h and the per-block streams of ``model`` (a looped port of a registered family) on ``tokens_BS``.

    ``attention_mask_BS`` (1 keep / 0 pad) and ``positions_BS`` have the model call's meaning.
    """
    b, s = tokens_BS.shape
    if positions_BS is None:
        positions_BS = layers.default_positions(b, s, None)
    mask_BST, _, _ = layers.step_mask(b, s, attention_mask_BS, None)
    cos, sin = layers.rope_cos_sin(positions_BS, model.rope_frequencies())
    ctx = layers.StepContext(cos=cos, sin=sin, mask=mask_BST, write_index=None)
    x_BSD = model._embed()(tokens_BS)
    collected = []
    traits = family.of(model).traits(model.cfg)
    keep_BS = None if attention_mask_BS is None else attention_mask_BS.astype(bool)
    for block in model.layers:
        x_BSD, streams = _block(block, x_BSD, ctx, traits, keep_BS)
        collected.append(streams)
    final_BSD = model._final_norm()(x_BSD)
    logits_BSV = wide(model._head(final_BSD))
    stacked = [jnp.stack(parts, axis=2) for parts in zip(*collected)]
    return Streams(logits_BSV, final_BSD, *stacked)
