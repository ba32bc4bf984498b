"""The option table (pytest_sme2/options.py) is the one source of both front ends' options.

The CLI's ``profile`` once copied the plugin's options and drifted (``--warmup`` 1 against the plugin's 3): every
``profile`` option named like a row of the table must take the plugin's type, choices and default, unless the row
itself says the CLI's default differs (``cli_default``).
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_sme2.cli import build_parser
from pytest_sme2.options import OPTIONS, PLUGIN_DEFAULT, Sme2Options, add_cli_options

pytestmark = pytest.mark.fast


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def _table_options(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    """(table name, action) of every option of ``parser`` spelled as a row of the table (``--runs`` = ``runs``)."""
    return [(flag[2:], action) for action in parser._actions for flag in action.option_strings
            if flag.startswith("--") and flag[2:] in OPTIONS]


def test_profile_takes_the_measurement_options_of_the_plugin() -> None:
    names = {name for name, _ in _table_options(_command("profile"))}
    assert {"runs", "warmup", "blocks", "time-budget", "busy-limit", "threads", "timeout", "cache-dir"} <= names


def test_every_profile_option_has_the_plugins_type_choices_and_default() -> None:
    plugin_defaults = {f.name: f.default for f in fields(Sme2Options)}
    for name, action in _table_options(_command("profile")):
        spec = OPTIONS[name]
        assert action.type is spec.type, f"--{name}: type {action.type} in the CLI, {spec.type} in the plugin"
        assert tuple(action.choices or ()) == tuple(spec.choices or ()), f"--{name}: choices differ"
        if spec.cli_default is PLUGIN_DEFAULT:
            assert action.default == spec.default, f"--{name}: default {action.default!r} in the CLI, {spec.default!r}"
            # ... which is also the default the plugin resolves to when the option is not given (a repeatable option
            # not given is None in argparse and () resolved)
            resolved = plugin_defaults[spec.dest.removeprefix("sme2_")]
            assert action.default == (None if resolved == () else resolved), f"--{name}"
        else:
            assert action.default == spec.cli_default, f"--{name}: the table's cli_default is not the CLI's"


def test_the_defaults_that_drifted_are_the_plugins() -> None:
    args = build_parser().parse_args(["profile", "--model", "toy_cnn"])
    assert (args.warmup, args.runs, args.blocks) == (3, 10, 15)
    assert isinstance(args.timeout, float) and args.timeout == 600.0
    assert args.cache_dir == Path(".sme2_cache")


def test_a_cli_option_checks_its_value_as_the_plugin_does(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="cmd")
    add_cli_options(parser, "warmup", "timeout", "device")
    assert parser.parse_args(["--timeout", "2.5"]).timeout == 2.5
    assert parser.parse_args([]).device is None  # the row says: the CLI chooses the device from --runner
    with pytest.raises(SystemExit):
        parser.parse_args(["--warmup", "1001"])
    assert "--warmup: '1001' is out of range; allowed: 0 to 1000 warm-up executions" in capsys.readouterr().err
