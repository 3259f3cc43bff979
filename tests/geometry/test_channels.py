"""CH1 and the named CH2 variants on hand-built token factors (spec §3.2–§3.3, §6.5; pitfalls 5, 18)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax.geometry import channels
from cfka_jax.geometry.channels import TokenFeatures
from tests.tolerances import F32

N_O, N_U, V, D, L = 3, 4, 7, 5, 3


def _features(key, n):
    k = jax.random.split(key, 8)
    return TokenFeatures(g=jax.random.normal(k[0], (n, V)), h=jax.random.normal(k[1], (n, D)),
                         wtg=jax.random.normal(k[2], (n, D)), logp=jax.random.normal(k[3], (n,)),
                         resid_attn=jax.random.normal(k[4], (n, L, D)), resid_mlp=jax.random.normal(k[5], (n, L, D)),
                         norm_attn=jax.random.normal(k[6], (n, L, D)), norm_mlp=jax.random.normal(k[7], (n, L, D)))


@pytest.fixture
def pair(key):
    return _features(key, N_O), _features(jax.random.fold_in(key, 1), N_U)


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=F32.exact_rtol, atol=F32.op_atol)


def test_ch1_is_the_product_of_raw_dot_products(pair):
    fo, fu = pair
    ref = np.array([[float(fo.g[o] @ fu.g[u]) * float(fo.h[o] @ fu.h[u]) for u in range(N_U)] for o in range(N_O)])
    _close(jax.jit(channels.ch1)(fo, fu), ref)


def _ref(fo, fu, streams_o, streams_u):
    gw = np.asarray(fo.wtg) @ np.asarray(fu.wtg).T
    sims = np.einsum("osd,usd->ou", np.asarray(streams_o), np.asarray(streams_u))
    return gw * sims


def test_each_named_variant_sums_its_streams(pair):
    fo, fu = pair
    def cat(f, a, b):
        return np.concatenate([np.asarray(getattr(f, a)), np.asarray(getattr(f, b))], axis=1)
    _close(channels.ch2(fo, fu, "ch2"), _ref(fo, fu, cat(fo, "norm_attn", "norm_mlp"), cat(fu, "norm_attn", "norm_mlp")))
    _close(channels.ch2(fo, fu, "ch2_singleh"), _ref(fo, fu, fo.norm_attn, fu.norm_attn))
    _close(channels.ch2(fo, fu, "ch2_wo_rms"),
           _ref(fo, fu, cat(fo, "resid_attn", "resid_mlp"), cat(fu, "resid_attn", "resid_mlp")))
    _close(channels.ch2(fo, fu, "gh_raw"), _ref(fo, fu, fo.resid_attn[:, 1:], fu.resid_attn[:, 1:]))
    _close(channels.ch2(fo, fu, "gh_inputln"), _ref(fo, fu, fo.norm_attn[:, 1:], fu.norm_attn[:, 1:]))
    _close(channels.ch2(fo, fu, "ch2_gwwg"), np.asarray(fo.wtg) @ np.asarray(fu.wtg).T)
    agg_o, agg_u = cat(fo, "norm_attn", "norm_mlp").sum(1), cat(fu, "norm_attn", "norm_mlp").sum(1)
    _close(channels.ch2(fo, fu, "ch2_aggh"), (np.asarray(fo.wtg) @ np.asarray(fu.wtg).T) * (agg_o @ agg_u.T))


def test_there_is_no_generic_ch2(pair):
    with pytest.raises(ValueError, match="no generic CH2"):
        channels.ch2(*pair, "ch2_all")
    with pytest.raises(ValueError, match="no streams"):
        channels.streams_of(pair[0], "ch2_gwwg")


def test_seq5_and_kembd(pair):
    fo, fu = pair
    assert channels.kembd([5, 5, 3, 9], [5, 3, 3, 1]) == 2 * 1 + 1 * 2
    kem = jnp.arange(N_O * N_U, dtype=jnp.float32).reshape(N_O, N_U)
    out = channels.seq5(fo, fu, kem)
    gg = np.asarray(fo.g) @ np.asarray(fu.g).T
    gw = np.asarray(fo.wtg) @ np.asarray(fu.wtg).T
    hh_l = np.asarray(fo.norm_attn[:, -1]) @ np.asarray(fu.norm_attn[:, -1]).T
    hh_oth = np.einsum("osd,usd->ou", np.asarray(fo.norm_attn[:, :-1]), np.asarray(fu.norm_attn[:, :-1]))
    _close(out["ch1"], gg * hh_l)
    _close(out["ch2"], gw * (hh_oth + np.asarray(kem)))  # the integer count is added without rescaling
    _close(out["ch2_no_kembd"], gw * hh_oth)
    _close(out["total"], out["ch1"] + out["ch2"])
