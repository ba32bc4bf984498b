"""Category rules: the spec's table case by case, normalization, and rules loaded from JSON files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sme2.errors import ConfigError
from pytest_sme2.evidence.categories import (
    CATEGORIES,
    DEFAULT,
    CategoryRule,
    CategoryRules,
    categorize,
    normalize,
    op_type_of,
)

pytestmark = pytest.mark.fast

XNNPACK_CASES = [
    ("Convolution (NHWC, F32) IGEMM #3", "Convolution"),
    ("Convolution (NHWC, F32) GEMM", "Convolution"),
    ("Convolution (NHWC, QC8) IGEMM #1", "Convolution"),
    ("Convolution (NHWC, F32) DWConv #7", "Convolution"),
    ("Convolution (NHWC, PF16) IGEMM", "Convolution"),
    ("Convert (NC) #1", "Data Movement"),  # contains "conv", is not a convolution
    ("Convert (NC, F16, QD8)", "Data Movement"),
    ("Max Pooling (NHWC, F32)", "Other"),
    ("Max Pooling (NHWC, S8) #1", "Other"),
    ("Fully Connected (NC, QS8, QC8W) GEMM", "GEMM"),
    ("Fully Connected (NC, F32) GEMM #12", "GEMM"),
    ("Fully Connected (NC, PF16) GEMM", "GEMM"),
    ("Batch Matrix Multiply", "GEMM"),
    ("Batch Matrix Multiply (NC, F32) GEMM #2", "GEMM"),
    ("Static Reshape (NC)", "Data Movement"),
    ("Transpose (ND, X32) #1", "Data Movement"),
    ("HardSwish (NC)", "Elementwise"),
    ("Softmax (NC, F32)", "Other"),
    ("Mean (ND) Reduce2", "Other"),
    ("Mean (ND) #1", "Other"),
    ("Binary Elementwise (ND)", "Elementwise"),
    ("Unary Elementwise (NC)", "Elementwise"),
    ("Invalid Unary Op", "Elementwise"),
    ("Add (ND) #1", "Elementwise"),
    ("Multiply (ND) #4", "Elementwise"),
    ("Divide (ND)", "Elementwise"),
    ("Clamp (NC) #2", "Elementwise"),
    ("GELU (NC)", "Elementwise"),
]

PORTABLE_CASES = [
    ("native_call_addmm.out", "GEMM"),
    ("native_call_mm.out", "GEMM"),
    ("native_call_bmm.out", "GEMM"),
    ("native_call_convolution.out", "Convolution"),
    ("native_call_native_layer_norm.out", "Other"),
    ("native_call__native_batch_norm_legit_no_training.out", "Other"),
    ("native_call__to_dim_order_copy.out", "Data Movement"),
    ("native_call_expand_copy.out", "Data Movement"),
    ("native_call_permute_copy.out", "Data Movement"),
    ("native_call_max_pool2d_with_indices.out", "Other"),
    ("native_call_mean.out", "Other"),
    ("native_call_add.out", "Elementwise"),
    ("native_call_relu.out", "Elementwise"),
]


@pytest.mark.parametrize(("name", "category"), XNNPACK_CASES, ids=[c[0] for c in XNNPACK_CASES])
def test_xnnpack_names(name: str, category: str) -> None:
    assert categorize(name) == category
    assert DEFAULT.categorize(name) == category


@pytest.mark.parametrize(("name", "category"), PORTABLE_CASES, ids=[c[0] for c in PORTABLE_CASES])
def test_portable_names(name: str, category: str) -> None:
    assert categorize(name) == category


def test_unmatched_is_other() -> None:
    assert categorize("Frobnicate (NC) #1") == "Other"
    assert categorize("") == "Other"
    assert categorize("Pack LH (X8)") in CATEGORIES


def test_five_fixed_categories() -> None:
    assert CATEGORIES == ("Convolution", "GEMM", "Data Movement", "Elementwise", "Other")


def test_repeat_counter_is_stripped() -> None:
    assert op_type_of("Convolution (NHWC, F32) IGEMM #3") == "Convolution (NHWC, F32) IGEMM"
    assert op_type_of("Add (ND) #12") == "Add (ND)"
    assert op_type_of("native_call_add.out") == "native_call_add.out"
    # Only a trailing " #<digits>" is a counter.
    assert op_type_of("weird#3") == "weird#3"


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("native_call_addmm.out", "native call addmm out"),
        ("aten::linear", "aten linear"),
        ("a/b.c:d_e", "a b c d e"),
        ("native_call__to_dim_order_copy.out", "native call to dim order copy out"),
        ("Fully Connected (NC, F32) GEMM", "fully connected (nc, f32) gemm"),
        ("  Spaced   Out  ", "spaced out"),
    ],
)
def test_normalize(raw: str, normalized: str) -> None:
    assert normalize(raw) == normalized


def test_normalization_is_what_lets_word_rules_match() -> None:
    # "_" is a word character: without normalization \baddmm\b could not match inside the name.
    rules = CategoryRules((CategoryRule("GEMM", r"\baddmm\b"),))
    assert rules.categorize("native_call_addmm.out") == "GEMM"
    assert rules.categorize("aten::addmm") == "GEMM"
    assert rules.categorize("native_call_addmmx.out") == "Other"


def test_first_match_wins() -> None:
    rules = CategoryRules((CategoryRule("Elementwise", "add"), CategoryRule("GEMM", "addmm")))
    assert rules.categorize("native_call_addmm.out") == "Elementwise"


def test_rules_round_trip_as_data() -> None:
    again = CategoryRules.from_list(DEFAULT.to_list())
    assert again == DEFAULT
    for name, category in XNNPACK_CASES + PORTABLE_CASES:
        assert again.categorize(name) == category


# ------------------------------------------------------------------------------------ rule files


def _write(tmp_path: Path, content: object, name: str = "rules.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_extend_from_json_list(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"category": "GEMM", "pattern": r"\bconvert\b"}])
    rules = CategoryRules.load(path)
    assert rules.categorize("Convert (NC) #1") == "GEMM"  # tried before the defaults
    assert rules.categorize("Convolution (NHWC, F32) IGEMM #1") == "Convolution"  # defaults still apply
    assert rules.categorize("Static Reshape (NC)") == "Data Movement"
    assert len(rules.rules) == len(DEFAULT.rules) + 1


def test_replace_from_json_object(tmp_path: Path) -> None:
    path = _write(tmp_path, {"replace": True, "rules": [{"category": "Elementwise", "pattern": r"\badd\b"}]})
    rules = CategoryRules.load(path)
    assert rules.categorize("Add (ND) #1") == "Elementwise"
    assert rules.categorize("Convolution (NHWC, F32) IGEMM #1") == "Other"  # the defaults are gone
    assert len(rules.rules) == 1


def test_replace_by_argument(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"category": "Data Movement", "pattern": "gemm"}])
    rules = CategoryRules.load(path, replace=True)
    assert rules.categorize("Fully Connected (NC, F32) GEMM") == "Data Movement"
    assert rules.categorize("Add (ND)") == "Other"


def test_object_without_replace_extends(tmp_path: Path) -> None:
    path = _write(tmp_path, {"rules": [{"category": "Other", "pattern": "hardswish"}]})
    rules = CategoryRules.load(path)
    assert rules.categorize("HardSwish (NC)") == "Other"
    assert rules.categorize("Add (ND)") == "Elementwise"


def test_rules_from_file_reach_the_timeline(tmp_path: Path, data_dir: Path) -> None:
    from pytest_sme2.evidence.trace import read_etdump

    path = _write(tmp_path, [{"category": "GEMM", "pattern": "transpose"}])
    trace = data_dir / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
    default = read_etdump(trace).operators()
    custom = read_etdump(trace, rules=CategoryRules.load(path)).operators()
    is_transpose = default["op_type"].str.startswith("Transpose")
    assert is_transpose.any()
    assert set(default.loc[is_transpose, "category"]) == {"Data Movement"}
    assert set(custom.loc[is_transpose, "category"]) == {"GEMM"}
    assert custom.loc[~is_transpose, "category"].tolist() == default.loc[~is_transpose, "category"].tolist()


BAD_FILES = {
    "not_json": "{not json",
    "empty": "",
    "number": "42",
    "string_rules": {"rules": "conv"},
    "missing_pattern": [{"category": "GEMM"}],
    "extra_key": [{"category": "GEMM", "pattern": "x", "note": "y"}],
    "not_an_object": ["GEMM"],
    "unknown_category": [{"category": "Matmul", "pattern": "x"}],
    "bad_regex": [{"category": "GEMM", "pattern": "(unclosed"}],
    "typo_in_top_level_key": {"rule": [{"category": "GEMM", "pattern": "x"}]},
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_rule_files_name_the_file(tmp_path: Path, kind: str) -> None:
    path = _write(tmp_path, BAD_FILES[kind], name=f"{kind}.json")
    before = path.read_bytes()
    with pytest.raises(ConfigError) as info:
        CategoryRules.load(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before


def test_binary_rule_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_bytes(bytes(range(128, 256)))  # not UTF-8: was a UnicodeDecodeError traceback
    with pytest.raises(ConfigError, match="is not UTF-8 text") as info:
        CategoryRules.load(path)
    assert str(path) in str(info.value)


def test_missing_rule_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        CategoryRules.load(tmp_path / "absent.json")
    assert str(tmp_path / "absent.json") in str(info.value)


def test_bad_rule_in_code_says_what_is_allowed() -> None:
    with pytest.raises(ConfigError, match="allowed: Convolution, GEMM, Data Movement, Elementwise, Other"):
        CategoryRule("Matmul", "x")
    with pytest.raises(ConfigError, match="invalid regular expression"):
        CategoryRule("GEMM", "(")
