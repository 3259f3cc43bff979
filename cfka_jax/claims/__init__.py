"""Claims: the public toolkit behind ``cfka proofs`` for checking lemmas against measurement.

A check is a function ``run(out_dir) -> list[Claim]``; a claim is one measured number against a tolerance
fixed in advance, with a verdict PASS / FAIL / REFUTED (``record``). ``checks`` measures the recurring shapes
(closed form vs simulation, fitted order with an interval, drift vs step size, gradient vs finite differences,
properties over random worlds), ``registry`` runs ours and yours into one list, ``export`` writes the table as
text, JSON, Markdown and LaTeX. Layer: above ``theory`` / ``geometry`` / ``lm_theory`` (it may import them;
they never import it). Worked example: docs/proofs.md.
"""

from cfka_jax.claims.checks import (Order, closed_form_vs_simulation, convergence_order, drift_vs_step,
                                    fitted_order, gradient_vs_finite_differences, property_over_worlds)
from cfka_jax.claims.export import (format_report, format_table, latex_escape, save_figure, to_json, to_latex,
                                    to_markdown, write_tables)
from cfka_jax.claims.record import STATUSES, Claim, Status, at_least, counts, holds, refuted, require_x64, summary
from cfka_jax.claims.registry import Check, Registry, assign_ids, check, load_checks
from cfka_jax.theory.predictor import Predictor

__all__ = [
    "Check", "Claim", "Order", "Predictor", "Registry", "STATUSES", "Status", "assign_ids", "at_least", "check",
    "closed_form_vs_simulation", "convergence_order", "counts", "drift_vs_step", "fitted_order", "format_report",
    "format_table", "gradient_vs_finite_differences", "holds", "latex_escape", "load_checks",
    "property_over_worlds", "refuted", "require_x64", "save_figure", "summary", "to_json", "to_latex",
    "to_markdown", "write_tables",
]
