"""GPM stages with the input embedding frozen (runs/stream.StreamSpec.gpm_embeddings): the embedding (tied head)
is bit-identical after the stage, the projected kernels still move; a bad value names the flag."""

import numpy as np
import pytest
from flax import nnx

from cfka_jax.models import family
from cfka_jax.runs.stream import StreamSpec, run_stream


def test_frozen_embedding_does_not_move_under_gpm(tmp_path):
    spec = StreamSpec(preset="smoke", out=str(tmp_path / "s"), stages=1, methods=("gpm",), gpm_embeddings="frozen",
                      cache_dir=str(tmp_path / "cache"), progress=False)
    from cfka_jax.runs import biography as bio
    from cfka_jax.runs.folder import RunFolder
    from cfka_jax.train.step import master_params

    result = run_stream(spec)
    bundle = bio._data(spec.scale, spec.cache_dir, None)
    model = bio.build_model(spec.scale, "qwen", len(bundle.tokenizer), 0)
    abstract = master_params(nnx.split(model, nnx.Param, ...)[1])
    pt, _ = RunFolder(spec.pt_folder).load_params(abstract)
    embed = family.get("qwen").embed
    before, after = nnx.to_pure_dict(pt), nnx.to_pure_dict(result.params)
    np.testing.assert_array_equal(after[embed]["embedding"], before[embed]["embedding"])
    moved = [np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in
             zip(__import__("jax").tree.leaves(after["layers"]), __import__("jax").tree.leaves(before["layers"]))]
    assert max(moved) > 0


def test_bad_gpm_embeddings_value_names_the_flag():
    with pytest.raises(ValueError, match="--gpm-embeddings"):
        StreamSpec(gpm_embeddings="half")
