"""The public claim API: verdicts, exports (text, JSON, Markdown, LaTeX), the registry and user files, and the
check-shape helpers; one end-to-end run of the worked example through `cfka proofs --extra`."""

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfka_jax import claims
from cfka_jax.claims import Check, Claim, Registry, at_least, holds, load_checks, refuted
from tests.tolerances import F64

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "my_lemma.py"


def test_verdicts_and_nan():
    assert holds("l", "a", 1e-9, 1e-8).status == "PASS" and holds("l", "a", 1e-7, 1e-8).status == "FAIL"
    assert at_least("l", "a", -0.9, -0.8).status == "FAIL" and at_least("l", "a", 0.5, 0.0).status == "PASS"
    assert refuted("l", "q", 0.3, 1e-3).status == "REFUTED" and refuted("l", "q", 1e-4, 1e-3).status == "FAIL"
    assert refuted("l", "quoted form", 0.3, 1e-3).quoted == "quoted form"
    assert {f("l", "a", math.nan, 1.0).status for f in (holds, at_least, refuted)} == {"FAIL"}
    with pytest.raises(ValueError, match="status"):
        claims.Claim("l", "a", 0.0, 1.0, "OK")
    rows = [holds("l", "a", 0.0, 1.0), refuted("l", "b", 2.0, 1.0), holds("m", "c", 2.0, 1.0)]
    assert claims.counts(rows) == {"claims": 3, "PASS": 1, "FAIL": 1, "REFUTED": 1}
    assert claims.summary(rows) == "3 claims: 1 PASS, 1 REFUTED (quoted forms that do not hold), 1 FAIL"


def test_exports(tmp_path):
    rows = claims.assign_ids([holds("a_b", "x | y & 50% of $z", 1.5e-12, 1e-8, "d"), holds("a_b", "nan", math.nan, 1.0)])
    data = json.loads(claims.to_json(rows))
    assert data["counts"] == {"claims": 2, "PASS": 1, "FAIL": 1, "REFUTED": 0}
    assert [r["id"] for r in data["claims"]] == ["a_b.1", "a_b.2"] and data["claims"][1]["measured"] == "nan"
    assert data["claims"][0]["measured"] == 1.5e-12
    assert "x \\| y" in claims.to_markdown(rows).splitlines()[2]
    tex = claims.to_latex(rows)
    assert r"a\_b & x | y \& 50\% of \$z & $1.500\times 10^{-12}$ & $1.0\times 10^{-8}$ & PASS \\" in tex
    paths = claims.write_tables(rows, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proofs.json", "proofs.md", "proofs.tex", "proofs.txt"]
    assert paths["txt"].read_text().startswith("lemma") and "[a_b] d" in paths["txt"].read_text()


def test_registry_stamps_ids_and_rejects_bad_checks(tmp_path):
    ok = lambda out: [holds("l", "a", 0.0, 1.0), holds("l", "b", 0.0, 1.0, id="mine")]
    reg = Registry([Check("one", ok, "here"), Check("two", lambda out: [holds("l", "c", 0.0, 1.0)], "there")])
    rows = reg.run(tmp_path, log=lambda *_: None)
    assert [(r.id, r.check) for r in rows] == [("l.1", "one"), ("mine", "one"), ("l.3", "two")]
    assert [r.check for r in reg.run(tmp_path, only="two", log=lambda *_: None)] == ["two"]
    with pytest.raises(ValueError, match="clashes"):
        reg.add(Check("one", ok, "elsewhere"))
    with pytest.raises(ValueError, match="--only 'nope'"):
        reg.select("nope")
    bad = Registry([Check("empty", lambda out: [], "f.py"), Check("boom", lambda out: 1 / 0, "g.py"),
                    Check("two", lambda out: [holds("l", "c", 0.0, 1.0)], "there")]).run(tmp_path, log=lambda *_: None)
    assert [r.status for r in bad] == ["FAIL", "FAIL", "PASS"]  # a check that cannot run FAILs; the others run
    assert "non-empty list of Claim" in bad[0].detail and "f.py" in bad[0].detail
    assert "ZeroDivisionError" in bad[1].detail and "'boom' (g.py)" in bad[1].detail and bad[1].check == "boom"
    with pytest.raises(ValueError, match="'mine'.*already used"):
        Registry([Check("a", ok, "x"), Check("b", ok, "y")]).run(tmp_path, log=lambda *_: None)


def test_load_checks_finds_marked_functions_or_run_and_names_the_file(tmp_path):
    marked = tmp_path / "marked.py"
    marked.write_text("from cfka_jax.claims import check, holds\n\n@check(name='lemma-a')\ndef a(out):\n"
                      "    return [holds('a', 's', 0.0, 1.0)]\n\n@check\ndef b(out):\n    return [holds('b', 's', 0.0, 1.0)]\n")
    plain = tmp_path / "plain.py"
    plain.write_text("from cfka_jax.claims import holds\n\ndef run(out):\n    return [holds('p', 's', 0.0, 1.0)]\n")
    assert [c.name for c in load_checks(marked)] == ["lemma-a", "b"] and [c.name for c in load_checks(plain)] == ["plain"]
    (tmp_path / "none.py").write_text("x = 1\n")
    for name, words in (("none.py", "neither"), ("missing.py", "not a Python file")):
        with pytest.raises(ValueError, match=words) as err:
            load_checks(tmp_path / name)
        assert name in str(err.value)
    (tmp_path / "broken.py").write_text("def run(out):\n    return [\n\n")
    (tmp_path / "raising.py").write_text("import math\nraise RuntimeError('no data here')\n")
    for name, words in (("broken.py", "line"), ("raising.py", "RuntimeError: no data here")):
        [only] = load_checks(tmp_path / name)  # a file that cannot be imported is one FAIL row, not a traceback
        [row] = Registry([only]).run(tmp_path, log=lambda *_: None)
        assert row.status == "FAIL" and name in row.detail and words in row.detail, row.detail


def test_a_claim_with_a_non_finite_measurement_cannot_pass():
    for status in ("PASS", "REFUTED"):
        with pytest.raises(ValueError, match="non-finite"):
            Claim("l", "s", float("nan"), 1.0, status)
        with pytest.raises(ValueError, match="non-finite"):
            Claim("l", "s", 0.0, float("inf"), status)
    assert Claim("l", "s", float("nan"), 1.0, "FAIL").status == "FAIL"
    assert holds("l", "s", float("nan"), 1.0).status == "FAIL" and refuted("l", "s", float("nan"), 1.0).status == "FAIL"


def test_fitted_order_and_its_interval():
    h = np.array([0.2, 0.1, 0.05, 0.025])
    exact = claims.fitted_order(h, 3.0 * h**2)
    np.testing.assert_allclose([exact.order, exact.low, exact.high], [2.0, 2.0, 2.0], rtol=F64.direct_rtol)
    noisy = claims.fitted_order(h, 3.0 * h**2 * np.array([1.05, 0.97, 1.02, 0.99]))
    assert noisy.low < 2.0 < noisy.high and noisy.high - noisy.low < 0.3
    assert claims.convergence_order("l", "order 1", h, 3.0 * h**2, 1.0, 0.1).status == "FAIL"
    claim, drifts = claims.drift_vs_step("l", "order 2", lambda s: 3.0 * s**2, h, 2.0, 0.1)
    assert claim.status == "PASS" and len(drifts) == 4 and "interval" in claim.detail
    with pytest.raises(ValueError, match="at least 3"):
        claims.fitted_order(h[:2], h[:2])


def test_gradient_closed_form_and_property_helpers(x64):
    f = lambda p: jnp.sum(jnp.sin(p["a"]) * p["b"] ** 2)
    x = {"a": jnp.linspace(0.1, 1.0, 5), "b": jnp.linspace(-1.0, 2.0, 5)}
    key = jax.random.key(0)
    assert claims.gradient_vs_finite_differences("g", "jax.grad", f, x, 1e-8, key=key).status == "PASS"
    wrong = lambda p: jax.tree.map(lambda g: 1.01 * g, jax.grad(f)(p))
    assert claims.gradient_vs_finite_differences("g", "1 % off", f, x, 1e-3, key=key, grad=wrong).status == "FAIL"
    predict = lambda t: jnp.exp(-jnp.asarray(t))[..., None] * jnp.ones(jnp.shape(t) + (3,))
    ts = jnp.arange(5.0)
    assert claims.closed_form_vs_simulation("c", "exact", predict, ts, predict(ts), 1e-12).status == "PASS"
    assert isinstance(predict, claims.Predictor)
    worst = claims.property_over_worlds("p", "u < 0.9", lambda k: jax.random.uniform(k), 0.9, draws=16)
    assert worst.status == "FAIL" and "worst of 16" in worst.detail


def test_cfka_proofs_extra_runs_the_worked_example(tmp_path, capsys):
    from cfka_jax import cli

    assert len(EXAMPLE.read_text().splitlines()) < 40
    try:
        code = cli.main(["proofs", "--only", "my-lemma", "--extra", str(EXAMPLE), "--out", str(tmp_path)])
    finally:
        jax.config.update("jax_enable_x64", False)  # `cfka proofs` is an entry point: it turns float64 on globally
    out = capsys.readouterr().out
    assert code == 0 and "2 claims: 2 PASS, 0 REFUTED" in out
    data = json.loads((tmp_path / "proofs.json").read_text())
    assert [(r["id"], r["check"], r["status"]) for r in data["claims"]] == [("my-lemma.1", "my-lemma", "PASS"),
                                                                            ("my-lemma.2", "my-lemma", "PASS")]
    assert (tmp_path / "my_lemma.png").stat().st_size > 10_000 and (tmp_path / "proofs.tex").exists()


def test_cfka_proofs_extra_bad_file_exits_2(tmp_path, capsys):
    from cfka_jax import cli

    assert cli.main(["proofs", "--extra", str(tmp_path / "nope.py"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.py" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert cli.main(["proofs", "--only", "no-such-check", "--out", str(tmp_path / "o")]) == 2
    assert "--only 'no-such-check'" in capsys.readouterr().err
