"""The STOC table script: run order, the paper rows, markdown, config checks and (slow) a smoke table."""

import json

import pytest

from cfka_jax.experiments import stoc_table as st


def test_rows_cover_the_grid_with_baselines_and_paper_rows_first():
    rows = st.table_rows()
    assert len(rows) == 2 + 4 * 3 * 2 and len(set(rows)) == len(rows)
    assert [r.method for r in rows[:2]] == ["naive", "replay-all"]
    assert {(r.alpha, r.method, r.update) for r in rows[2:2 + len(st.PAPER)]} == set(st.PAPER)
    assert len({r.folder for r in rows}) == len(rows)


def test_markdown_puts_paper_numbers_beside_ours():
    row = st.Row("stoc", "full", 0.5)
    text = st.markdown({row: {"Original/sFTA": 0.4, "Original/EM": 0.25, "Continual/sFTA": 0.7}},
                       {"Original/sFTA": 0.8, "Original/EM": 0.9})
    line = [x for x in text.splitlines() if x.startswith("| STOC")][0]
    assert line == "| STOC α=0.5 full | 40.0 | 25.0 | 70.0 | 51.54 | 29.84 | 90.47 |"
    assert "| PT | 80.0 | 90.0 | – |" in text


def test_config_checks():
    with pytest.raises(ValueError, match="kinds"):
        st.TableConfig(kinds=("stoc", "gen"))
    with pytest.raises(ValueError, match="alpha"):
        st.TableConfig(alphas=(0.5, 1.0))


@pytest.mark.slow
def test_smoke_table(tmp_path):
    cfg = st.TableConfig(preset="smoke", out=str(tmp_path), alphas=(0.5,), kinds=("stoc", "lamol"),
                         updates=("full",), eval_every=3, cache_dir=str(tmp_path / "cache"), progress=False)
    results = st.main(cfg)
    assert set(results) == {"naive full", "replay-all α=0.5 full", "STOC α=0.5 full", "LAMOL α=0.5 full"}
    assert (tmp_path / "original_sfta.png").stat().st_size > 0
    table = (tmp_path / "table.md").read_text()
    assert "| STOC α=0.5 full |" in table and "| LAMOL |" in table
    assert json.loads((tmp_path / "table.json").read_text())["PT"]["step"] > 0


def test_fact_coverage_counts_true_values_after_each_name():
    from cfka_jax.data.biography import Person
    from cfka_jax.eval.coverage import fact_coverage

    people = [Person(0, "Ann B. Cole", ("Boston, MA", "May 1, 1990"), True),
              Person(1, "Ann B. Co", ("Denver, CO", "June 2, 1991"), True),
              Person(2, "Zed Q. Li", ("Austin, TX", "July 3, 1992"), False)]
    texts = ["Ann B. Cole was born in Boston, MA. Ann B. Co was born on May 1, 1990.",  # the second value is wrong
             "Zed Q. Li lives in Austin, TX."]
    cov = fact_coverage(texts, people)
    assert cov == {"pt_people_named": 2, "cpt_people_named": 1, "pt_fact_coverage": 0.25,
                   "true_values_per_mention": 2 / 3}
