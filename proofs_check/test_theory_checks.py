"""Runs the theory-core proof checks under pytest (JAX_ENABLE_X64=1, strict promotion): no row may FAIL."""

import importlib

import pytest

CHECKS = ["check_reparam", "check_optimum", "check_taylor", "check_conservation", "check_diversity"]


@pytest.mark.parametrize("name", CHECKS)
def test_check_has_no_failed_claim(name, tmp_path):
    claims = importlib.import_module(f"proofs_check.{name}").run(tmp_path)
    assert claims, f"{name} returned no claims"
    failed = [c for c in claims if c.status == "FAIL"]
    assert not failed, "\n".join(f"{c.claim}: {c.measured:.3e} vs {c.tolerance:.1e} {c.detail}" for c in failed)
    assert list(tmp_path.glob("*.png")), f"{name} wrote no plot"
