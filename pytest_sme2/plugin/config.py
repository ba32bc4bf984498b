"""``--sme2-*`` options and ``sme2_*`` ini keys -> one frozen :class:`Sme2Options`; conflicts are usage errors.

The option table itself (names, types, help) lives in :mod:`pytest_sme2.options`, which the CLI shares;
this module registers it with pytest and resolves command line over ini over default.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.options import OPTION_TABLE, OptionSpec, Sme2Options, executable_file, existing_file, rules_file


def addoption(parser: pytest.Parser) -> None:
    """Register every ``--sme2-*`` flag with its ``sme2_*`` ini key (defaults are resolved in build_options)."""
    group = parser.getgroup("sme2", "pytest-sme2: performance regression testing of ExecuTorch models")
    for spec in OPTION_TABLE:
        kwargs: dict[str, Any] = {"dest": spec.dest, "help": spec.help, "default": None}
        if spec.name == "device":
            from pytest_sme2.runners.registry import help_text

            kwargs["help"] = help_text()
        if spec.action:
            kwargs["action"] = spec.action
        else:
            if spec.type is not None:
                kwargs["type"] = spec.type
            if spec.choices:
                kwargs["choices"] = spec.choices
            kwargs["metavar"] = spec.name.split("-")[-1].upper()
        group.addoption(spec.flag, **kwargs)
        parser.addini(spec.dest, help=f"{spec.help} [ini of {spec.flag}]", type=spec.ini_type,  # type: ignore[arg-type]
                      default=_ini_default(spec))


def _ini_default(spec: OptionSpec) -> Any:
    if spec.ini_type == "bool":
        return False
    if spec.ini_type == "linelist":
        return []
    return None


def _from_ini(config: pytest.Config, spec: OptionSpec) -> Any:
    raw = config.getini(spec.dest)
    if spec.ini_type in ("bool", "linelist"):
        return raw
    if raw in (None, ""):
        return None  # unset: build_options takes the default and knows it was not chosen (EMULATED_DEFAULTS)
    convert = spec.type
    if spec.choices and raw not in spec.choices:
        raise pytest.UsageError(f"ini {spec.dest} = {raw!r}: allowed values are {', '.join(spec.choices)}")
    if callable(convert):
        try:
            return convert(raw)
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"ini {spec.dest} = {raw!r}: {exc}") from None
    return raw


def build_options(config: pytest.Config) -> Sme2Options:
    """Resolve every ``--sme2-*`` option (command line, then ini, then default) and check conflicts."""
    _check_rootdir(config)
    values: dict[str, Any] = {}
    defaulted: set[str] = set()
    for spec in OPTION_TABLE:
        value = config.getoption(spec.dest)
        if value is None or value is False:
            value = _from_ini(config, spec)
        if value is None:
            value = spec.default
            defaulted.add(spec.dest.removeprefix("sme2_"))
        values[spec.dest.removeprefix("sme2_")] = value
    root = config.rootpath
    values["baseline_dir"] = root / str(values["baseline_dir"])
    values["cache_dir"] = root / str(values["cache_dir"])
    values["artifact_dir"] = root / str(values["artifact_dir"])
    from pytest_sme2.options import default_base_ref

    values["base_ref_given"] = values["base_ref"] is not None
    values["base_ref"] = default_base_ref(values["base_ref"])
    history = values["history"]
    values["history"] = (values["baseline_dir"].parent / ".sme2_history" if history is None
                         else None if str(history).strip().lower() == "none" else root / str(history))
    runtimes = values["runtimes"]
    values["runtimes"] = (values["cache_dir"] / "runtimes" if runtimes is None
                          else None if str(runtimes).strip().lower() == "none" else root / str(runtimes))
    for key in ("runner", "runner_off", "runner_timing", "runner_off_timing", "runner_log", "runner_off_log",
                "libcxx", "runner_libs", "qemu", "aarch64_wheel", "json", "markdown", "bmf", "gab", "pytest_benchmark",
                "out_dir", "rules"):
        if values[key] is not None:
            values[key] = Path(values[key])
    values["models"] = tuple(values["models"] or ())
    if config.getoption("sme2_models") is None and config.inipath is not None:
        from pytest_sme2.models import resolve_model_sources

        # Paths in an ini file are relative to that file, not to where pytest was started.
        values["models"] = resolve_model_sources(values["models"], config.inipath.parent)
    row = _device(values["device"], values["models"])
    if row.defaults is not None:  # the device's own defaults for what the user did not set (the emulated device's)
        values.update({k: v for k, v in row.defaults(values).items() if k in defaulted})
    for key in ("update_baseline", "require_baseline", "strict"):
        values[key] = bool(values[key])
    values["fail_on"] = resolve_fail_on(values["fail_on"], strict=values["strict"],
                                        require_baseline=values["require_baseline"])
    from pytest_sme2.runners.registry import resolve

    opts = resolve(Sme2Options(**values))
    _check_conflicts(opts)
    _check_files(config, opts)
    return opts


def _device(name: str, models: tuple[str, ...]) -> Any:
    """The registry's row of ``--sme2-device``. A name it does not know may be a device of the user's: registered by a
    module of ``sme2_models`` (imported here, before the session's first test, for that) or of an installed package's
    ``pytest_sme2.models`` entry point."""
    from pytest_sme2.errors import Sme2Error
    from pytest_sme2.models import load_model_sources
    from pytest_sme2.runners import registry

    try:
        if name not in registry.names():
            load_model_sources(models)
        return registry.device(name, sources="a module of sme2_models / --sme2-models")
    except Sme2Error as exc:
        raise pytest.UsageError(f"--sme2-device={name}: {exc}") from None


def _check_files(config: pytest.Config, opts: Sme2Options) -> None:
    """Refuse reports on one path, or on a file the session reads, before any test runs (atomic.refuse_overlaps).

    The reports are ours and pytest's (``--junitxml``, pytest-html's ``--html``) and the step summary the session
    appends to; what it reads is every file option, the ini file, the test files named on the command line, and
    the baselines and history runs it keeps.
    """
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.store.files import files_matching, refuse_overlaps

    outputs = [(flag, Path(path)) for flag, path in (
        ("--sme2-json", opts.json), ("--sme2-markdown", opts.markdown), ("--sme2-bmf", opts.bmf),
        ("--sme2-gab", opts.gab), ("--sme2-pytest-benchmark", opts.pytest_benchmark),
        ("--junitxml", getattr(config.option, "xmlpath", None)), ("--html", getattr(config.option, "htmlpath", None)),
        ("$GITHUB_STEP_SUMMARY", os.environ.get("GITHUB_STEP_SUMMARY", "").strip() or None),
    ) if path]
    if not outputs:
        return
    inputs = [(spec.flag, Path(getattr(opts, spec.dest.removeprefix("sme2_"))))
              for spec in OPTION_TABLE if spec.type in (executable_file, existing_file, rules_file)
              and getattr(opts, spec.dest.removeprefix("sme2_")) is not None]
    inputs += [("--sme2-models", Path(m)) for m in opts.models if m.endswith(".py")]
    if config.inipath is not None:
        inputs.append(("the ini file", config.inipath))
    here = config.invocation_params.dir
    tests = (here / arg.split("::")[0] for arg in config.args)
    inputs += [("a test path", path) for path in tests if path.is_file()]
    inputs += [(f"--sme2-baseline-dir {opts.baseline_dir}", f) for f in files_matching(opts.baseline_dir, "*.json")]
    if opts.history is not None:
        inputs += [(f"--sme2-history {opts.history}", f) for f in files_matching(opts.history, "runs/*/*.jsonl")]
    try:
        refuse_overlaps(outputs, inputs)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def resolve_fail_on(given: tuple[str, ...] | None, *, strict: bool, require_baseline: bool) -> tuple[str, ...]:
    """What fails besides a regression: ``--sme2-fail-on``, else the CI default (``missing``) or nothing; the older
    flags add to it (``--sme2-strict``: missing, invalid, inconclusive; ``--sme2-require-baseline``: missing)."""
    from pytest_sme2.options import FAIL_ON_CI, ci_environment

    chosen = list(given) if given is not None else list(FAIL_ON_CI if ci_environment() else ())
    if strict:
        chosen += ["missing", "invalid", "inconclusive"]
    if require_baseline:
        chosen.append("missing")
    return tuple(dict.fromkeys(chosen))


def _check_rootdir(config: pytest.Config) -> None:
    """Refuse a rootdir that an ``--sme2-*`` path value moved: test ids, and so baseline keys, would move with it.

    pytest chooses its rootdir before plugins add their options, so ``--sme2-baseline-dir /abs/bl`` given as
    two arguments counts ``/abs/bl`` as a test path; without an ini file the rootdir becomes the common
    ancestor (``/``, ``/tmp``) and every node id changes. Found by choosing the rootdir again without those
    values, as pytest does.
    """
    from _pytest.config.findpaths import determine_setup

    args = list(config.invocation_params.args)
    takes_value = {spec.flag for spec in OPTION_TABLE if not spec.action}
    moved = [(flag, args[i + 1]) for i, flag in enumerate(args[:-1]) if flag in takes_value
             and (config.invocation_params.dir / args[i + 1]).exists()]
    if not moved:
        return
    values = {value for _, value in moved}
    positional = [a for a in args if not a.startswith("-") and a not in values]
    try:
        rootpath, *_ = determine_setup(
            inifile=config.option.inifilename, override_ini=config.option.override_ini, args=positional,
            rootdir_cmd_arg=config.option.rootdir or None, invocation_dir=config.invocation_params.dir)
    except Exception:  # pytest's internals changed: then this check says nothing rather than something wrong
        return
    if rootpath != config.rootpath:
        flag, value = moved[0]
        raise pytest.UsageError(
            f"{flag} {value}: pytest took {value} for a test path when it chose the rootdir (it does so before "
            f"plugins add their options), which moved the rootdir from {rootpath} to {config.rootpath} and would "
            f"change every test id, and so every baseline key. Write it as one argument, {flag}={value}, or add "
            "an ini file to the project (pytest.ini, or [tool.pytest.ini_options] in pyproject.toml)"
        )


def _check_conflicts(opts: Sme2Options) -> None:
    """The device's own conflicts and the options it does not take (the registry's rows), then the rules of every
    device: the SME2-off arm's builds need the SME2-on arm's, and the latency source needs its builds."""
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.runners import registry

    try:
        if opts.pool:  # each device of a pool is checked with its own options, by the process holding it (lab)
            row = registry.device(opts.device)
        else:
            row = registry.check_options(opts)
            registry.check_threads_here(opts, os.cpu_count() or 0)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    builds = {"--sme2-runner": opts.runner, "--sme2-runner-off": opts.runner_off,
              "--sme2-runner-timing": opts.runner_timing, "--sme2-runner-off-timing": opts.runner_off_timing,
              "--sme2-runner-log": opts.runner_log, "--sme2-runner-off-log": opts.runner_off_log}
    if opts.runner_off is not None and opts.runner is None:
        raise pytest.UsageError("--sme2-runner-off needs --sme2-runner (the SME2-on build) as well")
    for kind in ("timing", "log"):
        off = builds[f"--sme2-runner-off-{kind}"]
        if off is not None and opts.runner_off is None:
            raise pytest.UsageError(f"--sme2-runner-off-{kind} is the SME2-off arm's {kind} build: it needs "
                                    "--sme2-runner-off (that arm's traced build) as well")
    if opts.runner_off_timing is not None and opts.runner_timing is None:
        raise pytest.UsageError(
            "--sme2-runner-off-timing needs --sme2-runner-timing too: both arms of an on/off comparison must take "
            "their latency from the same kind of runs (untraced runs are faster than traced ones)")
    if opts.runner_timing is not None and opts.runner_off is not None and opts.runner_off_timing is None:
        raise pytest.UsageError(
            "--sme2-runner-timing with --sme2-runner-off needs --sme2-runner-off-timing (the SME2-off timing build): "
            "both arms of an on/off comparison must take their latency from the same kind of runs")
    if row.takes("runner") and not opts.own_runner:  # a device that runs the user's executor_runner builds
        if opts.latency == "untraced" and opts.runner_timing is None:
            raise pytest.UsageError(
                f"--sme2-latency=untraced on --sme2-device={opts.device} needs timing-only executor_runner builds "
                "(built without the event tracer) beside the traced ones: pass --sme2-runner-timing (and "
                "--sme2-runner-off-timing for on/off tests), or use --sme2-latency=traced (see docs/run-modes.md)"
            )
        if opts.latency == "traced" and opts.runner_timing is not None:
            raise pytest.UsageError(
                "--sme2-latency=traced with --sme2-runner-timing: the timing builds would not be used. Drop "
                "--sme2-latency (timing builds give untraced latency) or the timing builds"
            )
