"""Bad input to the markers, options and CLI arguments: refused before anything measures.

Two markers where a test takes one are refused at collection (the closest would win without a word); a
threshold that cannot apply to what the test measures fails that test naming the marker and what would make it
apply; a number out of an option's range is refused at start-up with the range.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.cli import build_parser
from pytest_sme2.options import OPTION_TABLE

EXAMPLE_MODELS = Path(__file__).parent.parent / "example_models" / "models.py"

#: part of the bad-input tier (tests/test_bad_input.py says what it holds; -m bad_input runs it alone)
pytestmark = pytest.mark.bad_input


def _collect_only(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")
    pytester.makepyfile(test_m=source)
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--sme2-blocks=1", "--sme2-runs=1")


@pytest.mark.parametrize(("source", "expected"), [
    pytest.param("""
        import pytest

        @pytest.mark.sme2_model("toy_cnn")
        @pytest.mark.sme2_model("tiny_transformer")
        def test_m(exported_model, sme2_runner, sme2_baseline):
            sme2_baseline.check(sme2_runner.profile(exported_model))
        """, "has 2 @pytest.mark.sme2_model markers (sme2_model('tiny_transformer'); sme2_model('toy_cnn'))",
        id="two-models-on-the-test"),
    pytest.param("""
        import pytest

        pytestmark = pytest.mark.sme2_threshold(latency_pct=10)

        @pytest.mark.sme2_model("toy_cnn")
        @pytest.mark.sme2_threshold(p50_ms=5)
        def test_m(exported_model, sme2_runner, sme2_baseline):
            sme2_baseline.check(sme2_runner.profile(exported_model))
        """, "has 2 @pytest.mark.sme2_threshold markers (sme2_threshold(p50_ms=5); sme2_threshold(latency_pct=10))",
        id="threshold-on-module-and-test"),
    pytest.param("""
        import pytest

        class TestM:
            pytestmark = pytest.mark.sme2_model("toy_cnn")

            @pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.sme2_model("tiny_transformer"))])
            def test_m(self, x, exported_model, sme2_runner, sme2_baseline):
                sme2_baseline.check(sme2_runner.profile(exported_model))
        """, "test_m.py::TestM::test_m[1]: has 2 @pytest.mark.sme2_model markers", id="param-and-class"),
])
def test_a_marker_given_twice_is_refused_at_collection(pytester: pytest.Pytester, source: str,
                                                       expected: str) -> None:
    result = _collect_only(pytester, source)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    assert "1 error during collection" in out
    assert expected in out
    assert "takes one: the closest would win" in out
    assert "Traceback" not in out
    assert not (pytester.path / ".sme2_baselines").exists()


def test_one_marker_per_test_still_collects(pytester: pytest.Pytester) -> None:
    """The refusal is about two markers, not one marker on a parametrized test or a module-wide threshold."""
    pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")
    pytester.makepyfile(test_m="""
        import pytest

        pytestmark = pytest.mark.sme2_threshold(latency_pct=10)

        @pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.sme2_model("toy_cnn")),
                                       pytest.param(2, marks=pytest.mark.sme2_model("tiny_transformer"))])
        def test_m(x, exported_model, sme2_runner, sme2_baseline):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "2 tests collected" in result.stdout.str()


@pytest.mark.slow
def test_min_speedup_on_one_profile_fails_naming_what_applies(pytester: pytest.Pytester,
                                                               sme2_shared_cache: Path) -> None:
    """``min_speedup`` judges a pair's speedup; a plain profile has none: the test fails (it passed, unchecked)."""
    pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")
    pytester.makepyfile(test_m="""
        import pytest

        @pytest.mark.sme2_model("toy_cnn")
        @pytest.mark.sme2_threshold(min_speedup=1.5)
        def test_m(exported_model, sme2_runner, sme2_baseline):
            sme2_baseline.check(sme2_runner.profile(exported_model))
    """)
    result = pytester.runpytest_subprocess(f"--sme2-cache-dir={sme2_shared_cache}", "-p", "no:cacheprovider",
                                           "--sme2-blocks=1", "--sme2-runs=1", "--sme2-warmup=0",
                                           "--sme2-busy-limit=100", timeout=600)
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "test_m.py::test_m: sme2_threshold(min_speedup=1.5) cannot apply" in out
    assert "sme2_runner.profile_on_off()" in out and "compare_backends()" in out
    assert not (pytester.path / ".sme2_baselines").exists()  # refused before it judged or recorded anything


# ------------------------------------------------------------------------------------------ numeric ranges


def _numeric(convert: Any) -> bool:
    """Whether an argparse ``type=`` takes numbers (it turns "1" or "0.5" into an int or float)."""
    for text in ("1", "0.5"):
        try:
            if isinstance(convert(text), (int, float)):
                return True
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
    return False


def _cli_actions(parser: argparse.ArgumentParser, prefix: str = "pytest-sme2") -> Iterator[tuple[str, Any]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _cli_actions(sub, f"{prefix} {name}")
        elif action.type is not None and action.option_strings:
            yield f"{prefix} {action.option_strings[0]}", action.type


NUMERIC: list[tuple[str, Callable[[str], Any]]] = [
    *((spec.flag, spec.type) for spec in OPTION_TABLE if spec.type is not None and _numeric(spec.type)),
    *((name, convert) for name, convert in _cli_actions(build_parser()) if _numeric(convert)),
]


def test_every_numeric_option_is_checked_here() -> None:
    names = [name for name, _ in NUMERIC]
    for expected in ("--sme2-blocks", "--sme2-runs", "--sme2-timeout", "--sme2-time-budget", "--sme2-export-processes",
                     "pytest-sme2 profile --blocks", "pytest-sme2 profile --time-budget",
                     "pytest-sme2 history steps --max-pvalue", "pytest-sme2 analyze --warmup"):
        assert expected in names


@pytest.mark.parametrize(("name", "convert"), NUMERIC, ids=[name for name, _ in NUMERIC])
def test_every_numeric_option_has_a_range(name: str, convert: Callable[[str], Any]) -> None:
    """``profile --blocks 99999999999999999999`` was taken and measured until killed: every number has a range."""
    for text in ("99999999999999999999", "1e30", "nan", "inf", "-1"):
        with pytest.raises(argparse.ArgumentTypeError) as info:
            convert(text)
        message = str(info.value)
        assert repr(text) in message or text in message
        assert "allowed" in message or "range" in message or "use" in message


@pytest.mark.parametrize(("argv", "expected"), [
    (["profile", "--model", "toy_cnn", "--blocks", "99999999999999999999"],
     "argument --blocks: '99999999999999999999' is out of range; allowed: 1 to 1000 blocks"),
    (["history", "steps", "--max-pvalue", "5"], "a p-value bound is above 0 and below 1"),
    (["profile", "--model", "toy_cnn", "--time-budget", "-5"], "argument --time-budget: '-5' is out of range"),
])
def test_cli_refuses_out_of_range_numbers_at_start_up(argv: list[str], expected: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    assert expected in capsys.readouterr().err


def test_plugin_refuses_out_of_range_numbers_at_start_up(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--sme2-blocks=99999999999999999999")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "'99999999999999999999' is out of range; allowed: 1 to 1000 blocks" in result.stderr.str()
    pytester.makeini("[pytest]\nsme2_threads = 100000\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini sme2_threads = '100000': '100000' is out of range; allowed: 1 to 256 threads" in result.stderr.str()


# ------------------------------------------------------------------------------------------ CLI arguments

DATA = Path(__file__).parent / "data"


def test_profile_refuses_a_model_given_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``profile --model toy_cnn --model toy_cnn`` measured twice, the second summary replacing the first."""
    from pytest_sme2.cli import main

    out = tmp_path / "out"
    code = main(["profile", "--model", "toy_cnn", "--model", "tiny_transformer", "--model", "toy_cnn",
                 "--models", str(EXAMPLE_MODELS), "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--model toy_cnn given more than once" in err
    assert not out.exists()


@pytest.mark.parametrize("content", [bytes(range(256)) * 8, b"I 00:00:00.000585 executorch:executor_runner.cpp:340]\n"],
                         ids=["random-bytes", "a-runner-log-without-xnnpack"])
def test_analyze_refuses_an_xnnlog_that_is_not_one(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   content: bytes) -> None:
    """``analyze --xnnlog <random bytes>`` was accepted and the file ignored without a word."""
    from pytest_sme2.cli import main

    log = tmp_path / "not.xnnlog"
    log.write_bytes(content)
    summary = tmp_path / "summary.json"
    code = main(["analyze", str(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"), "--xnnlog", str(log),
                 "--json", str(summary)])
    assert code == 2
    assert f"{log} is not an XNNPACK log" in capsys.readouterr().err
    assert not summary.exists()
    # A real XNNPACK log of the same recording is taken (the portable build's names no kernel but is one).
    for real in ("toy_cnn_fp32_xnnpack_simd-on_t1.xnnlog", "toy_cnn_fp32_portable_simd-on_t1.xnnlog"):
        assert main(["analyze", str(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"), "--xnnlog", str(DATA / real),
                     "--json", str(summary), "--quiet"]) == 0


@pytest.mark.slow
def test_profile_has_a_time_budget_and_says_when_it_shrank_the_blocks(example_export: Any, sme2_shared_cache: Path,
                                                                       tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``pytest-sme2 profile`` had no time budget: 1000 blocks of a model were 1000 blocks, however long."""
    from pytest_sme2.cli import main

    example_export("fp32", "xnnpack")  # the cache holds toy_cnn: this measures, it does not export
    out = tmp_path / "out"
    code = main(["profile", "--model", "toy_cnn", "--models", str(EXAMPLE_MODELS), "--blocks", "1000",
                 "--time-budget", "0.1", "--busy-limit", "100", "--cache-dir", str(sme2_shared_cache),
                 "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr()
    note = next(line for line in printed.out.splitlines() if line.startswith("note: time budget 0.1 s: "))
    blocks = int(note.removeprefix("note: time budget 0.1 s: ").split()[0])
    assert 6 <= blocks < 1000  # never below the floor of 6 blocks
    # A budget spent before the predicted blocks ran ends the measurement there (still at least 6 blocks) and says so.
    spent = re.search(rf"time budget 0\.1 s spent after (\d+) of {blocks} blocks", note)
    measured = int(spent.group(1)) if spent else blocks
    assert 6 <= measured <= blocks
    assert f"block {measured}/{blocks}" in printed.err  # progress per block, to the end
    assert f"block {measured + 1}/{blocks}" not in printed.err
    summary = json.loads((out / "toy_cnn_fp32_xnnpack" / "analysis_summary.json").read_text())
    assert summary["profile"]["measurement"]["time_budget_s"] == 0.1
