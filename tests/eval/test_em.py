import jax
import numpy as np

from cfka_jax.eval.em import em_prompts, exact_match_rate
from cfka_jax.data.biography import BiographyConfig, generate_world
from cfka_jax.data.tokenize import tokenize_split, train_word_tokenizer
from tests.helpers import split, tiny_model  # noqa: F401  (tiny_model builds the test LM)


def _world(tmp_path):
    world = generate_world(BiographyConfig(num_pt_people=3, num_cpt_people=2, train_bios_per_person=5))
    tok = train_word_tokenizer((b.text for bios in world.splits.values() for b in bios), str(tmp_path / "tok"))
    return world, tok, tokenize_split(world.splits["cpt_test"], world.people, tok)


def test_prompts_are_sentence_prefixes_and_answers_are_values(tmp_path):
    world, tok, test = _world(tmp_path)
    prompts, skipped = em_prompts(test, world.people, tok)
    assert skipped == 0 and len(prompts) == 5 * len(test.pid)
    by_pid = {p.pid: p for p in world.people}
    first = prompts[:5]
    values = set(by_pid[int(test.pid[0])].values)
    assert {p.answer for p in first} == values
    # every prompt of this biography stops right before its value: the text before it ends the sentence prefix
    ids = test.doc(0)
    for p in first:
        lo = int(test.idx[0, p.attr])
        assert tuple(int(t) for t in ids[lo - len(p.prompt_ids):lo]) == p.prompt_ids


def test_code_form_keeps_the_name_bug(tmp_path):
    world, tok, test = _world(tmp_path)
    prompts, _ = em_prompts(test, world.people, tok, form="code", max_docs=1)
    name = {p.pid: p for p in world.people}[int(test.pid[0])].fullname
    clean, _ = em_prompts(test, world.people, tok, form="clean", max_docs=1)
    text = tok.decode(prompts[0].prompt_ids)
    assert text.startswith(name.split()[0]) and text != tok.decode(clean[0].prompt_ids)


def test_exact_match_rate_runs_and_is_a_fraction(tmp_path):
    from cfka_jax.models.qwen import QwenConfig, QwenModel
    from flax import nnx

    world, tok, test = _world(tmp_path)
    prompts, _ = em_prompts(test, world.people, tok, max_docs=2)
    cfg = QwenConfig(model_type="qwen2", vocab_size=len(tok), hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    res = exact_match_rate(QwenModel(cfg, rngs=nnx.Rngs(0)), prompts, tok, key=jax.random.key(0), max_new_tokens=4,
                           batch_size=8)
    assert res["EM_n"] == len(prompts) and 0.0 <= res["EM"] <= 1.0
    np.testing.assert_allclose(sum(res[f"EM/{a}"] for a in ("birthplace",)) >= 0, True)
