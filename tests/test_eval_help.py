"""`tau-bench-env eval --help` names every default an option has (issue 34)."""

from __future__ import annotations

import pytest

from tau_bench_env.cli.main import main


def test_eval_help_names_the_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines at any word
    for default in (
        "task split (default: test)",
        "(default: all)",
        "(default: native)",
        "variable holding the API key (default: OPENAI_API_KEY)",
        "sampling temperature (default: 0.0)",
        "per request (default: 120.0)",
        "per request (default: 3)",
        "first wait between retries (default: 1.0)",
        "episodes at once per process (default: 8)",
    ):
        assert default in text
    assert "(default: None)" not in text and "(default: False)" not in text
    assert text.count("(default: test)") == 1
