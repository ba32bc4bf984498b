"""The kernel view (``pytest_sme2.report.kernel_view``): XNNPACK kernels side by side, and SME2 kernel evidence."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pytest_sme2.evidence.kernels import (
    isa_suffix,
    kernel_log_from_dict,
    kernel_rows,
    parse_xnnpack_log,
    read_xnnpack_log,
    side_by_side,
)
from pytest_sme2.report.comparison import compare_on_off
from pytest_sme2.report.kernel_view import side_by_side_table
from pytest_sme2.report.markdown import render_table
from pytest_sme2.report.tables import recommendations
from pytest_sme2.results import (
    TestResult,
)
from report.builders import DATA, MN

pytestmark = pytest.mark.fast

def test_kernel_view_isa_suffix_and_stored_log_round_trip() -> None:
    assert isa_suffix("xnn_x32_transposec_ukernel__2x4_scalar_int") == "scalar"
    assert isa_suffix("xnn_x16_transposec_ukernel__16x16_reuse_switch_avx2") == "avx2"
    assert isa_suffix("xnn_f32_gemm_minmax_ukernel_7x32__avx512f_broadcast") == "avx512f"
    assert isa_suffix("xnn_f32_gemm_minmax_ukernel_6x8__aarch64_neonfma_ld128") == "aarch64_neonfma"
    assert isa_suffix("xnn_pf32_gemm_minmax_ukernel_32x32c4__neonsme2") == "neonsme2"
    log = read_xnnpack_log(DATA / f"{MN}_simd-on_t1.xnnlog")
    again = kernel_log_from_dict(json.loads(json.dumps(log.to_dict())))
    assert again.kernels == log.kernels and again.sme2_kernels == log.sme2_kernels
    rows = kernel_rows(log)
    assert len(rows) == len(log.kernels) and not any(r.sme2 for r in rows)
    off = read_xnnpack_log(DATA / f"{MN}_simd-off_t1.xnnlog")
    sbs = side_by_side(off, log)
    changed = [r.changed for r in sbs]
    assert changed == sorted(changed, reverse=True)  # differing kinds first
    table = side_by_side_table(off, log)
    assert table is not None and "| gemm |" in "\n".join(render_table(table))



def test_sme2_kernel_evidence_when_the_on_log_names_one(tt: TestResult) -> None:
    # A log line in XNNPACK's format naming an SME2 kernel (the x86 recordings have none).
    sme2_log = parse_xnnpack_log("Note (XNNPACK): Using gemm microkernel "
                                 "'xnn_pf32_gemm_minmax_ukernel_32x32c4__neonsme2'.", source="arm.xnnlog")
    off, on = tt.profile_off.analysis, tt.profile.analysis  # type: ignore[union-attr]
    cmp = compare_on_off(off, on, on_kernels=sme2_log)
    assert cmp.kernels is not None and not cmp.kernels.sme2_missing
    assert cmp.findings[-1] == ("SME2 on selected 1 SME2 kernel, e.g. "
                                "`xnn_pf32_gemm_minmax_ukernel_32x32c4__neonsme2`.")
    result = replace(tt, comparison=cmp)
    assert not any("no SME2 kernel" in r.text for r in recommendations(result))
    assert any("no SME2 kernel" in r.text for r in recommendations(tt))
