from cfka_jax.experiments import biography_table as table


def test_table_variants_parse_and_cover_the_issue_rows():
    names = {(m, u) for m, u, _ in table.VARIANTS}
    assert {("naive", "full"), ("ewc", "full"), ("replay-all", "full"), ("replay-half", "full"), ("naive", "freeze"),
            ("naive", "lora")} <= names
    row = table._row("x", {"Original/sFTA": 0.5})
    assert row.startswith("| x | 50.0 |") and row.count("–") == len(table.COLUMNS) - 1
    assert table.TableConfig().preset == "small"
