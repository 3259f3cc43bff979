"""The ``cfka`` command line: every subcommand parses and dispatches to an importable entry point."""

import importlib

import pytest

from cfka_jax import cli


@pytest.mark.parametrize("command", sorted(cli.PASSTHROUGH))
def test_passthrough_entry_points_exist_and_print_help(command, capsys):
    module, entry = cli.PASSTHROUGH[command]
    assert callable(getattr(importlib.import_module(module), entry))
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0 and "usage" in capsys.readouterr().out


def test_cpt_parses_generative_replay_switches():
    args = cli.build_parser().parse_args(["cpt", "--method", "stoc", "--alpha", "0.8", "--score-norm", "n_queries",
                                          "--snippet-rule", "window_sum", "--no-minhash", "--eval-every", "25"])
    switches = cli._switches(args)
    assert (args.method, args.alpha, args.eval_every) == ("stoc", 0.8, 25)
    assert (switches.score_norm, switches.snippet_rule, switches.minhash) == ("n_queries", "window_sum", False)
    assert switches.tag == "-score_norm=n_queries-snippet_rule=window_sum-minhash=False"
