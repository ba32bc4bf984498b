"""Option value types shared by the CLI and the pytest plugin (argparse ``type=`` callables).

Each raises ``argparse.ArgumentTypeError`` with a message that says what is allowed, so both
front ends reject bad single values at parse time with the option's name attached by argparse.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def percent(text: str) -> float:
    """``5``, ``5%`` or ``2.5 %`` -> 5.0 / 2.5 (percent, 0 < x < 100)."""
    value = _percent_value(text, "5")
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; allowed: above 0 and below 100 percent, e.g. 5")
    return value


def nonnegative_percent(text: str) -> float:
    """``0``, ``60`` or ``60%`` -> percent, 0 <= x <= 1000."""
    value = _percent_value(text, "60")
    if not (math.isfinite(value) and 0 <= value <= 1000):
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; use a percentage from 0 to 1000")
    return value


def _percent_value(text: str, example: str) -> float:
    """The number of ``5``, ``5%`` or ``2.5 %``; not a number is refused with ``example`` as a hint."""
    try:
        return float(str(text).strip().removesuffix("%").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage; use e.g. {example} or {example}%") from None


def precision_percent(text: str) -> float:
    """``0``, ``5`` or ``2.5%`` -> percent, 0 <= x < 100 (± this share of the median; 0 = every block)."""
    value = nonnegative_percent(text)
    if value >= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; a precision is ± a percentage of the median "
                                         "below 100, e.g. 5, or 0 to measure every block")
    return value


#: (variable, what it holds) naming a pull or merge request's target branch, per CI, in the order tried
BASE_BRANCH_VARIABLES = ("GITHUB_BASE_REF", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME")


def default_base_ref(given: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``--sme2-base-ref`` resolved: as given ("none" = off, ""), else ``origin/<target branch>`` of the pull or
    merge request the CI runs for, else "" (off: a push to a branch has nothing to compare its baselines with)."""
    if given is not None:
        return "" if given.strip().lower() == "none" else given.strip()
    env = os.environ if environ is None else environ
    target = next((env[v] for v in BASE_BRANCH_VARIABLES if env.get(v)), "")
    return f"origin/{target}" if target else ""


def whole_number(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``, ``what`` it counts naming the unit.

    The upper bound is the point: ``--blocks 99999999999999999999`` would be taken and then measure until killed.
    """

    def convert(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:  # also a number of more than 4300 digits (Python's int() limit)
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; allowed: {low} to {high} "
                                             f"{what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is out of range; allowed: {low} to {high} {what}")
        return value

    convert.__name__ = f"whole number ({what})"
    return convert


def number_in(low: float, high: float, what: str, *, zero: bool = True) -> Callable[[str], float]:
    """An argparse type: a finite number from ``low`` to ``high`` (above ``low`` when ``zero`` is False)."""

    def convert(text: str) -> float:
        value = _finite_float(text)
        if not (low <= value <= high if zero else low < value <= high):
            above = "from" if zero else "above"
            raise argparse.ArgumentTypeError(f"{text!r} is out of range; allowed: {above} {low:g} to {high:g} {what}")
        return value

    convert.__name__ = f"number ({what})"
    return convert


def probability(text: str) -> float:
    """A p-value bound: 0 < p < 1 (``5`` would take every step for a significant one)."""
    value = _finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; a p-value bound is above 0 and below 1, "
                                         "e.g. 0.001")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; use e.g. 30") from None
    # nan compares false with everything, so it would slip past the range checks below.
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; use e.g. 30")
    return value


#: Seconds one measurement may take by default (``--sme2-time-budget``, ``profile --time-budget``).
TIME_BUDGET_S = 60.0

#: The numeric options' ranges, shared by the plugin's option table and the CLI: a value past these would run for
#: days or mean nothing, and the defaults sit far inside them.
BLOCKS = whole_number(1, 1000, "blocks")
RUNS = whole_number(1, 10_000, "executions per block")
WARMUP = whole_number(0, 1000, "warm-up executions")
THREADS = whole_number(1, 256, "threads")
PROCESSES = whole_number(1, 64, "processes")
RUN_COUNT = whole_number(1, 10_000, "runs")
TIMEOUT_S = number_in(0, 86_400, "seconds (a day)", zero=False)
BUDGET_S = number_in(0, 86_400, "seconds (a day; 0 = no limit)")
COOLDOWN_S = number_in(0, 3600, "seconds (an hour)")
MIN_BLOCK = number_in(0, 60_000, "ms (a minute)")
MAX_BLOCK = number_in(0, 3_600_000, "ms (an hour; 0 = no limit)")


def executable_file(text: str) -> Path:
    """An existing, executable file (an ``executor_runner`` build)."""
    p = Path(text).expanduser()
    if not p.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist; pass the path of your executor_runner build")
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file; pass the executor_runner binary itself")
    if not os.access(p, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} is not executable; run: chmod +x {text}")
    return p.resolve()


def existing_file(text: str) -> Path:
    p = Path(text).expanduser()
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"{text} does not exist or is not a file")
    return p


def existing_dir(text: str) -> Path:
    p = Path(text).expanduser()
    if not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} does not exist or is not a directory")
    return p


def comma_list(text: str) -> tuple[str, ...]:
    """``adb, ssh`` -> ("adb", "ssh"): a comma (or line) separated list, empty items dropped, order kept."""
    return tuple(dict.fromkeys(x.strip() for x in str(text).replace("\n", ",").split(",") if x.strip()))


#: What ``--sme2-fail-on`` can make fail besides a regression (which always fails).
FAIL_ON_CHOICES = ("missing", "invalid", "inconclusive", "drift")
#: ``--sme2-fail-on`` when it is not given: fail closed where ``CI`` is set (a missing baseline fails, a verdict that
#: left its change undecided fails, and a session that decided nothing is not green), friendly on a developer's machine
#: (the first run records, exit 0). ``invalid`` and ``inconclusive`` fail only what was to be decided
#: (:attr:`pytest_sme2.gate.verdict.Verdict.undecided`): an unchanged artifact's invalid, like its drift, does not fail.
FAIL_ON_CI = ("missing", "invalid", "inconclusive")


def fail_on_list(text: str) -> tuple[str, ...]:
    """``missing,inconclusive`` -> ("missing", "inconclusive"); ``none`` -> () (only a regression fails)."""
    items = tuple(dict.fromkeys(x.strip() for x in str(text).split(",") if x.strip()))
    if items == ("none",):
        return ()
    bad = [x for x in items if x not in FAIL_ON_CHOICES]
    if bad or not items:
        raise argparse.ArgumentTypeError(
            f"{text!r}: allowed are a comma list of {', '.join(FAIL_ON_CHOICES)}, or none (a regression always fails)")
    return items


def ci_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs in CI: ``CI`` set to anything but empty, 0 or false (GitHub Actions, GitLab, ... set it)."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def rules_file(text: str) -> Path:
    """A JSON file of category rules that loads (see ``categories.CategoryRules.load``)."""
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.evidence.categories import CategoryRules

    p = Path(text).expanduser()
    try:
        CategoryRules.load(p)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return p


# ----------------------------------------------------------------------------------------------
# The pytest option table: every flag ``--sme2-*`` with an ini key ``sme2_*``. The plugin registers
# these and builds one frozen Sme2Options from them; nothing else reads the pytest config.

from dataclasses import dataclass  # noqa: E402 - the table below is the second half of this module

#: How many ms the measured runs of a block should take by default (``--sme2-min-block-ms``): a shorter block's
#: median swings with one scheduler tick. On toy_cnn XNNPACK (~80 us; benchmarks/gate_paired.py, looks 8/15/22/30,
#: margin 5 %) blocks of 10 runs (0.8 ms) caught a real +10 % in 88-96 % of same-session comparisons, blocks of 27
#: runs (2.2 ms: what the rule gives it, 3 x 10 executions with the 3 warm-ups) in 99.5-100 %, with 0/400 A/A false
#: alarms either way (pytest_sme2.measure.blocks._size_blocks).
MIN_BLOCK_MS = 2.4

#: How many ms a block's executions, warm-up included, should take at most by default (``--sme2-max-block-ms``): a
#: slower model (a portable-kernel program: 230-340 ms per execution) gets one warm-up and the runs that fit, at least
#: 3, after its first block (pytest_sme2.measure.blocks._size_blocks). Its executions show no warm-up (real A/A rounds,
#: benchmarks/data/aa_*_portable.json: the first after a load 0.997-1.002 of the block median) and its block medians
#: are nearly as precise from 3 runs as from 10. With the plugin's looks 8/15/22/30 at a 5 % margin, blocks of 1 + 3
#: instead of 3 + 10 (benchmarks/gate_paired.py --runs 3 --warmup 1): tiny_transformer portable (335 ms) +10 %
#: caught 100 % at 0/3/6 % drift, MobileNetV3 portable (236 ms, recorded on a busy VM) 99.0-100 %, 0/400 A/A false
#: alarms each, at 2.2-3.2x fewer executions per comparison.
MAX_BLOCK_MS = 1000.0


class _PluginDefault:
    """The default of a CLI option that is the plugin's (:attr:`OptionSpec.cli_default` unset)."""

    def __repr__(self) -> str:
        return "the plugin's default"


PLUGIN_DEFAULT: Any = _PluginDefault()


@dataclass(frozen=True)
class OptionSpec:
    """One ``--sme2-*`` option: name (without prefix), ini type, default, argparse type and help.

    The CLI's commands take some of these as ``--NAME`` (:func:`add_cli_options`): the same type, choices, help and
    default, unless ``cli_default`` says the CLI's default differs, and why, in the row itself.
    """

    name: str
    help: str
    default: object = None
    type: object = None
    ini_type: str | None = "string"
    action: str | None = None
    choices: tuple[str, ...] | None = None
    #: how the value reads in ``--help`` (default: the name's last word, upper case)
    metavar: str | None = None
    #: the CLI's default where it differs from the plugin's on purpose (the row's comment says why)
    cli_default: object = PLUGIN_DEFAULT

    @property
    def flag(self) -> str:
        return "--sme2-" + self.name

    @property
    def dest(self) -> str:
        return "sme2_" + self.name.replace("-", "_")

    @property
    def value_name(self) -> str:
        return self.metavar or self.name.split("-")[-1].upper()

    @property
    def default_in_cli(self) -> object:
        return self.default if self.cli_default is PLUGIN_DEFAULT else self.cli_default


OPTION_TABLE: tuple[OptionSpec, ...] = (
    # The devices, what each is and what it takes are the registry's (pytest_sme2.runners.registry): its names are the
    # values, checked when the options are resolved (a device of one's own is registered by a module pytest-sme2
    # imports, after this table is read); the plugin's help lists them.
    OptionSpec("device", "where models run: a device of pytest_sme2.runners.registry (default: local)", "local",
               # profile: host when --runner is given (the user's executor_runner), else local
               cli_default=None),
    OptionSpec("runner", "executor_runner build with SME2 ON (and the event tracer, for per-operator "
               "timing); needed by --sme2-device=android; host and qemu build pytest-sme2's own runner without it",
               type=executable_file),
    OptionSpec("runner-off", "executor_runner build with SME2 OFF (XNNPACK_ENABLE_ARM_SME2=OFF), for on/off "
               "comparisons", type=executable_file),
    OptionSpec("runner-timing", "timing-only executor_runner (the --sme2-runner build without the event tracer, "
               "with -DEXECUTORCH_ENABLE_LOGGING=ON): when given, the gate's latency comes from its untraced runs, "
               "one beside each traced run (docs/run-modes.md)", type=executable_file),
    OptionSpec("runner-off-timing", "timing-only build of the SME2-off arm (needed with --sme2-runner-timing and "
               "--sme2-runner-off: both arms take their latency the same way)", type=executable_file),
    OptionSpec("runner-log", "XNNPACK-logging executor_runner (Debug build, XNN_LOG_LEVEL=5): run once per model "
               "and session; its log names the micro-kernels selected (SME2 or not) for the reports and the SME2 "
               "kernel check", type=executable_file),
    OptionSpec("runner-off-log", "XNNPACK-logging build of the SME2-off arm (for the on/off kernel diff)",
               type=executable_file),
    OptionSpec("qemu", "qemu-aarch64 (user mode, QEMU 11.1 or newer: it emulates SME2) for --sme2-device=qemu "
               "(default: qemu-aarch64 on PATH)", type=executable_file),
    OptionSpec("aarch64-wheel", "the manylinux_2_28_aarch64 executorch wheel (same version as the installed one) to "
               "cross-build the qemu device's runner against, for machines without access to PyPI (default: "
               "fetched with pip once, then cached)", type=existing_file),
    OptionSpec("emulated-timing", "--sme2-device=qemu: measure emulated time in full (6 blocks of 1 warm-up + 3 runs "
               "per arm unless --sme2-blocks/--sme2-runs/--sme2-warmup say otherwise) and gate it against the "
               "emulated baseline, which only such a run records. Default: one execution per arm, for the kernel "
               "evidence and the outputs (what the SME2 question needs); its emulated time is reported, not gated "
               "(emulated time is no device's, and under SME2 emulation one execution of a small model can take a "
               "minute)", False, ini_type="bool", action="store_true"),
    OptionSpec("count-instructions", "--sme2-device=qemu: count the instructions each arm executes under emulation "
               "(one more execution per arm, under QEMU's execution log) and gate them against the test's count "
               "baseline, exactly unless sme2_threshold(instructions_pct=...) allows more: counts are the same on "
               "every host, so one committed count baseline gates every CI runner (docs/arm-emulation.md)", False,
               ini_type="bool", action="store_true"),
    OptionSpec("libcxx", "libc++_shared.so to push beside the runner (Android runners built with the shared "
               "C++ STL)", type=existing_file),
    OptionSpec("runner-libs", "a directory of shared libraries the runner needs (a runner linked against "
               "executorch's shared libraries): every .so in it is pushed once per content beside the runner and put "
               "on LD_LIBRARY_PATH (Android only)", type=existing_dir),
    OptionSpec("serial", "adb serial of the Android device (default: $ANDROID_SERIAL, else the only device)"),
    OptionSpec("pool", "a device pool from these sources, comma separated (adb: every phone the adb server lists as "
               "'device'): each pytest-xdist worker holds one device (-n auto: one worker per device) and each test "
               "runs on a device that has what it needs (--sme2-needs, the sme2_device marker); see docs/lab.md",
               (), comma_list, metavar="SOURCES"),
    OptionSpec("adb-connect", "--sme2-pool=adb: `adb connect` these HOST:PORT addresses first (comma separated: "
               "phones over Wi-Fi, DeviceFarmer/STF devices, remote device streaming)", (), comma_list,
               metavar="ADDRESSES"),
    OptionSpec("needs", "--sme2-pool: what every device test needs of its device, comma separated: sme2, no-sme2, "
               "svl>=BITS, soc=NAME (a test's sme2_device marker adds its own)", metavar="NEEDS"),
    OptionSpec("matrix", "--sme2-pool: run every device test on every device that serves it (one test per device, "
               "each with its own baseline and report row), not once on any of them", False, ini_type="bool",
               action="store_true"),
    OptionSpec("ssh-host", "--sme2-device=ssh: the Arm host to measure on, user@host[:port] or a Host of your ssh "
               "config (its IdentityFile, Port, ProxyJump ... apply; no password prompts)"),
    OptionSpec("ssh-config", "--sme2-device=ssh (and a pool's ssh hosts): an ssh_config file used instead of "
               "~/.ssh/config (ssh -F)", type=existing_file),
    OptionSpec("ssh-hosts", "--sme2-pool=ssh: the Arm hosts of the pool, comma separated (ini: one per line), each "
               "user@host[:port] or a Host of your ssh config; a host that does not answer, refuses the key or is no "
               "Arm host is left out with its fix", (), comma_list, metavar="HOSTS"),
    OptionSpec("latency", "which runs give the gate's latency samples: untraced = an untraced run beside the traced "
               "one in every block (twice the measuring time; on host/android the timing-only builds, "
               "--sme2-runner-timing); traced = the traced runs that also give the operator breakdown, so the latency "
               "includes the event tracer's cost (~0.3-0.8 us per operator event on the local runtime, see "
               "docs/run-modes.md) (default: untraced when timing builds are given, else traced)", None,
               choices=("traced", "untraced")),
    OptionSpec("busy-limit", "percent of a block's time the runtime may be preempted or wait for a CPU before the "
               "block counts as disturbed by other load and is measured again (a machine that stays busy makes the "
               "measurement invalid, never a regression); so does a block during which other processes used over a "
               "quarter of the host's CPU time; 100 switches both checks off (default 5)", 5.0,
               nonnegative_percent, metavar="PCT"),
    OptionSpec("runs", "measured executions per block (default 10)", 10, RUNS),
    OptionSpec("time-budget", "seconds one measurement may take: when the second block shows that blocks x runs "
               "would take longer (a model on the portable kernels), the runs per block shrink to 3 and then the "
               "blocks to 6, and the result says so; 0 = no limit (default 60)", TIME_BUDGET_S, BUDGET_S,
               metavar="SECONDS"),
    OptionSpec("min-block-ms", "milliseconds the measured runs of a block should take: a model faster than that "
               "(tens of microseconds) gets more runs per block after the first, up to 3x --sme2-runs executions "
               "(warm-up included); the runs asked for stay the measurement's recipe. 0 = exactly --sme2-runs "
               "(default 2.4: blocks of 10 runs of an 80 us model caught a real +10 percent slowdown in 88-96 "
               "percent of same-session comparisons, blocks of 27 in 99.5-100 percent)", MIN_BLOCK_MS,
               MIN_BLOCK),
    OptionSpec("max-block-ms", "milliseconds a block's executions, warm-up included, should take at most: a slower "
               "model (hundreds of ms per execution on the portable kernels) gets 1 warm-up and the runs that fit, "
               "at least 3, after its first block; the runs and warm-up asked for stay the measurement's recipe. "
               "0 = no limit (default 1000)", MAX_BLOCK_MS, MAX_BLOCK),
    OptionSpec("warmup", "warm-up executions per block, left out of statistics; the first execution is cold "
               "(default 3)", 3, WARMUP),
    OptionSpec("blocks", "blocks (program loads or runner processes, interleaved when two arms are compared) per "
               "measurement; blocks are the gate's independent units, at least 4 per arm for a 95 percent interval "
               "(default 15)", 15, BLOCKS),
    OptionSpec("precision", "stop measuring once the median latency is known to +/- this percent (the 95 percent "
               "interval of the block medians, looked at after every block from the 6th; every arm of a pair); a "
               "measurement too noisy for it runs every --sme2-blocks block. 0 = always every block (default: half "
               "the test's latency margin)", None, precision_percent),
    OptionSpec("threads", "CPU threads for the runtime (default 1; at most the CPUs of the host or phone)", 1,
               THREADS),
    OptionSpec("timeout", "seconds allowed per runner process (default 600)", 600.0, TIMEOUT_S),
    OptionSpec("baseline-dir", "directory of baseline JSON files, relative to the rootdir "
               "(default .sme2_baselines)", ".sme2_baselines"),
    OptionSpec("update-baseline", "write (or overwrite) the baseline of every sme2 test instead of comparing",
               False, ini_type="bool", action="store_true"),
    OptionSpec("require-baseline", "a test without a baseline for this device fails (with the command that "
               "creates it) instead of recording one; implied by --sme2-strict", False, ini_type="bool",
               action="store_true"),
    OptionSpec("artifact-dir", "where the programs, inputs and runner builds of recorded baselines are kept, so a "
               "changed artifact is compared with the baseline's in the same session; relative to the rootdir "
               "(default .sme2_artifacts; cache it in CI, do not commit it)", ".sme2_artifacts"),
    OptionSpec("drift-allowance", "percent the machine may drift between sessions, set by hand: added to the margin "
               "when a changed artifact can only be compared with another session's samples (stored, runtime), and the "
               "verdict says it is uncalibrated. Default: calibrated per test and device from the history store "
               "(--sme2-history); with too little history such a comparison is inconclusive, never a pass",
               None, nonnegative_percent),
    OptionSpec("margin", "default relative regression margin in percent, for tests without "
               "sme2_threshold(latency_pct=...) (default 5)", 5.0, percent),
    OptionSpec("strict", "invalid and inconclusive verdicts, and tests without a baseline, fail the test "
               "(default: reported, not failed); the same as --sme2-fail-on=missing,invalid,inconclusive", False,
               ini_type="bool", action="store_true"),
    OptionSpec("fail-on", "what fails besides a regression, a comma list of missing (no baseline for this device: "
               "fails with the command that records it, instead of recording), invalid and inconclusive (a verdict "
               "that left something undecided: a changed artifact's, or an absolute check's; an unchanged "
               "artifact's invalid only reports), drift; or none. Default: missing,invalid,inconclusive when the CI "
               "environment variable is set (and a session that decided nothing fails unless none), else none (the "
               "first run on a machine records, exit 0)", type=fail_on_list),
    OptionSpec("no-confirm", "do not re-measure once before reporting a regression/inconclusive", False,
               ini_type="bool", action="store_true"),
    OptionSpec("json", "write all sme2 results (schema-versioned JSON) to this file"),
    OptionSpec("markdown", "write the markdown report to this file"),
    OptionSpec("bmf", "write the results in Bencher Metric Format to this file (bencher run --adapter json --file "
               "FILE): per measured arm its median latency, and the interval of the median as lower/upper values"),
    OptionSpec("gab", "write the results as github-action-benchmark's customSmallerIsBetter JSON to this file "
               "(tool: customSmallerIsBetter, output-file-path: FILE)"),
    OptionSpec("pytest-benchmark", "write the results as a pytest-benchmark --benchmark-json document to this file "
               "(pytest-benchmark compare FILE ... lists and compares them)"),
    OptionSpec("base-ref", "the branch this change goes into (e.g. origin/main): at the end of the session every "
               "baseline file that differs from its version at the merge-base with it is compared with that version, "
               "and a slower one fails the session unless sme2_acknowledged.json in the rootdir accepts it "
               "(docs/history.md). none = off. Default: origin/$GITHUB_BASE_REF on a GitHub pull request, "
               "origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME on a GitLab merge request, else off"),
    OptionSpec("history", "the history store every session appends its results to (one file per run; "
               "docs/history.md), relative to the rootdir, or none to keep no history (default: .sme2_history "
               "beside the baseline directory)"),
    OptionSpec("runtimes", "where the baseline's executorch is installed (pip install --no-deps, once) when "
               "executorch changed since the baseline, to measure the baseline's program on it (the local runtime; "
               "on host and qemu, pytest-sme2's runner built against its SDK) beside the change in this session "
               "(comparison runtime-session); relative to the rootdir, or none to compare a runtime change with the "
               "stored samples instead (default: runtimes/ in --sme2-cache-dir)"),
    OptionSpec("cache-dir", "export cache (default .sme2_cache; pytest: relative to the rootdir)", Path(".sme2_cache"),
               Path, metavar="DIR"),
    OptionSpec("export-processes", "before the first measurement, the models of every selected test that the "
               "export cache lacks are exported in this many processes at once (nothing is measured meanwhile); "
               "1 = each test exports its model when it runs. Under pytest-xdist each worker exports its own tests' "
               "models (default: the host's CPUs, at most 4)", None, PROCESSES),
    OptionSpec("out-dir", "where runs write traces and logs (default: a pytest temp dir)"),
    OptionSpec("models", "module or .py file registering extra models (repeatable; ini: one per line)",
               ini_type="linelist", action="append"),
    OptionSpec("rules", "JSON file of extra operator-category rules, tried before the defaults: a list of "
               '{"category": ..., "pattern": ...} or {"rules": [...], "replace": true} (as pytest-sme2 analyze '
               "--rules)", type=rules_file),
    OptionSpec("big-cores", "Android: taskset mask to pin the runner to (default: the fastest cluster; "
               "'none' to run unpinned)"),
    OptionSpec("cooldown", "Android: seconds to wait between blocks for the phone to cool (default 0)", 0.0,
               COOLDOWN_S),
    OptionSpec("fixed-performance", "Android: enable fixed performance mode while measuring (Android 11+)",
               False, ini_type="bool", action="store_true"),
)


#: The option table by name (without the ``--sme2-`` prefix).
OPTIONS: Mapping[str, OptionSpec] = {spec.name: spec for spec in OPTION_TABLE}


def add_cli_options(parser: argparse.ArgumentParser, *names: str) -> None:
    """Give a CLI command the table's options ``names`` as ``--NAME``: the plugin's type, choices, action and help
    (its ``--sme2-*`` flags named as the CLI's), and its default unless the row's ``cli_default`` says otherwise.

    The one source of both front ends' options: the CLI copied them once and drifted (``--warmup`` 1 against the
    plugin's 3, ``--timeout`` a whole number against seconds); tests/test_options.py walks the CLI's ``profile``.
    """
    for name in names:
        spec = OPTIONS[name]
        kwargs: dict[str, Any] = {"default": spec.default_in_cli, "help": spec.help.replace("--sme2-", "--")}
        if spec.action:
            kwargs["action"] = spec.action
        else:
            kwargs.update(type=spec.type, choices=spec.choices, metavar=spec.value_name)
        parser.add_argument(f"--{spec.name}", **kwargs)


@dataclass(frozen=True)
class Sme2Options:
    """Every ``--sme2-*`` value, resolved (command line over ini over default)."""

    device: str = "local"
    runner: Path | None = None
    runner_off: Path | None = None
    runner_timing: Path | None = None
    runner_off_timing: Path | None = None
    runner_log: Path | None = None
    runner_off_log: Path | None = None
    libcxx: Path | None = None
    runner_libs: Path | None = None
    qemu: Path | None = None
    aarch64_wheel: Path | None = None
    #: qemu: measure emulated time in full and gate it (default: one execution per arm, time reported, not gated)
    emulated_timing: bool = False
    #: qemu: count instructions executed under emulation and gate them against the count baseline
    count_instructions: bool = False
    serial: str | None = None
    #: the device sources of the lab's pool (``pytest_sme2.runners.pool``); () = no pool, one device
    pool: tuple[str, ...] = ()
    #: ``adb connect`` addresses read into the pool
    adb_connect: tuple[str, ...] = ()
    #: what every device test needs (``Need.parse``'s text); None = anything
    needs: str | None = None
    #: every device test once per serving device of the pool
    matrix: bool = False
    #: ssh: the host (``user@host[:port]`` or an ssh config Host) and an ssh_config file (None: ~/.ssh/config)
    ssh_host: str | None = None
    ssh_config: Path | None = None
    #: the pool's ssh hosts (``--sme2-pool=ssh``)
    ssh_hosts: tuple[str, ...] = ()
    #: None = decided by the builds: untraced with timing builds, else traced (see :attr:`latency_mode`)
    latency: str | None = None
    busy_limit: float = 5.0
    runs: int = 10
    time_budget: float = TIME_BUDGET_S
    min_block_ms: float = MIN_BLOCK_MS
    max_block_ms: float = MAX_BLOCK_MS
    warmup: int = 3
    blocks: int = 15
    #: percent; None = half of each test's latency margin (:meth:`~pytest_sme2.plugin.markers.Threshold.precision`)
    precision: float | None = None
    threads: int = 1
    timeout: float = 600.0
    baseline_dir: Path = Path(".sme2_baselines")
    update_baseline: bool = False
    require_baseline: bool = False
    artifact_dir: Path = Path(".sme2_artifacts")
    #: percent, set by hand; None = calibrated from the history (:mod:`pytest_sme2.gate.calibration`)
    drift_allowance: float | None = None
    margin: float = 5.0
    strict: bool = False
    #: statuses that fail besides a regression (``missing`` = no baseline); resolved: CI default applied
    fail_on: tuple[str, ...] = ()
    no_confirm: bool = False
    json: Path | None = None
    markdown: Path | None = None
    bmf: Path | None = None
    gab: Path | None = None
    pytest_benchmark: Path | None = None
    #: the ref re-recorded baselines are compared against at the session's end ("" = off); resolved: CI default applied
    base_ref: str = ""
    #: whether the user named it (a problem reaching the merge-base then fails the session; a CI default only says so)
    base_ref_given: bool = False
    #: the history store (None = no history, ``--sme2-history=none``); resolved beside baseline_dir by default
    history: Path | None = None
    cache_dir: Path = Path(".sme2_cache")
    #: where the baselines' runtimes are installed (:mod:`pytest_sme2.measure.runtimes`); None = not (``none``)
    runtimes: Path | None = None
    #: None = :func:`pytest_sme2.program.pool.default_processes`
    export_processes: int | None = None
    out_dir: Path | None = None
    models: tuple[str, ...] = ()
    rules: Path | None = None
    big_cores: str | None = None
    cooldown: float = 0.0
    fixed_performance: bool = False
    #: resolved from the device's registry row (:func:`pytest_sme2.runners.registry.resolve`): the device runs
    #: pytest-sme2's own runner (built from the wheel), not a user's build ...
    own_runner: bool = False
    #: ... and that runner is its own timing build (latency untraced by default)
    own_runner_untraced: bool = False

    @property
    def latency_mode(self) -> str:
        """Where the gate's latency comes from: ``--sme2-latency``, else untraced when timing builds are given."""
        if self.latency is not None:
            return self.latency
        if self.own_runner_untraced:
            return "untraced"  # pytest-sme2's own runner is its own timing build
        return "untraced" if self.runner_timing is not None else "traced"
