"""The four continual-dynamics proof checks (issue 6) run and produce no FAIL row (REFUTED rows are expected)."""

import importlib

import pytest

CHECKS = ["check_continual_ewc", "check_continual_replay", "check_continual_oscillation", "check_continual_margin"]
EXPECTED_REFUTED = {"check_continual_ewc": 2, "check_continual_replay": 1, "check_continual_oscillation": 0,
                    "check_continual_margin": 1}


@pytest.mark.parametrize("name", CHECKS)
def test_check_has_no_fail(name, tmp_path):
    claims = importlib.import_module(f"proofs_check.{name}").run(tmp_path)
    assert claims, f"{name} returned no claims"
    failed = [c for c in claims if c.status == "FAIL"]
    assert not failed, "\n".join(f"{c.claim}: {c.measured} vs {c.tolerance} ({c.detail})" for c in failed)
    assert sum(c.status == "REFUTED" for c in claims) == EXPECTED_REFUTED[name]
    pngs = list(tmp_path.glob("*.png"))
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)
