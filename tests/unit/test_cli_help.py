"""The command line explains itself: every option has help, help fits 80 columns, and the server imports no CLI."""

import argparse
import subprocess
import sys

import pytest

from asymspec_agents import cli, pair
from asymspec_agents.server import app


def generate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asymspec generate")
    cli._add_generate(parser)
    return parser


@pytest.mark.parametrize("build", [generate_parser, app.build_parser, pair.build_parser],
                         ids=["generate", "serve", "pair"])
def test_every_option_has_help_and_the_help_fits_80_columns(build, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser = build()
    missing = [action.option_strings for action in parser._actions if action.option_strings and not action.help]
    assert not missing
    wide = [line for line in parser.format_help().splitlines() if len(line) > 80]
    assert not wide
    assert "None" not in parser.format_help()  # no default shown as a Python value a flag cannot take


def test_the_server_module_imports_no_cli_module():
    code = "import sys, asymspec_agents.server.app; print([m for m in sys.modules if m.startswith('asymspec_agents.cli')])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
