"""Roofline: op FLOPs and bytes from shapes (closed forms), machine peaks, and the verdict on
kernels of known FLOPs and bytes on several GPUs of the table (hand-derived)."""
from __future__ import annotations

import pytest

from stepsim.calibration.op_costs import op_cost
from stepsim.calibration.roofline_inputs import KernelWork
from stepsim.scenarios.gpus import machine_for, parse_peaks
from stepsim.scenarios.roofline import fusion_factor, mixed_precision_factor, roofline
from stepsim.simcore.errors import ModelError

A100_40 = {"name": "NVIDIA A100-PG509-200", "totalGlobalMem": 42_298_834_944}
A100_80 = {"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_000_000_000}
V100 = {"name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16_945_709_056}
H100 = {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_000_000_000}
MI300X = {"name": "AMD Instinct MI300X", "totalGlobalMem": 206_141_652_992}


def test_mm_flops_and_compulsory_bytes():
    c = op_cost("aten::mm", [[128, 256], [256, 512]], ["float", "float"])
    assert c.flops == 2 * 128 * 256 * 512
    assert c.bytes == 4 * (128 * 256 + 256 * 512 + 128 * 512)
    assert c.dtype == "fp32"


def test_addmm_skips_the_bias_in_flops_but_reads_it():
    c = op_cost("aten::addmm", [[512], [32, 2048], [2048, 512], [], []],
                ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"])
    assert c.flops == 2 * 32 * 2048 * 512
    assert c.bytes == 2 * (512 + 32 * 2048 + 2048 * 512 + 32 * 512)
    assert c.dtype == "bf16"


def test_conv_output_from_concrete_stride_and_padding():
    # conv2d(x[10,256,14,14], w[512,256,3,3], None, stride [2,2], padding [1,1], dilation [1,1])
    c = op_cost("aten::conv2d", [[10, 256, 14, 14], [512, 256, 3, 3], [], [], [], [], []],
                ["c10::BFloat16", "c10::BFloat16", "", "ScalarList", "ScalarList",
                 "ScalarList", "Scalar"], ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    assert c.flops == 2 * 10 * 512 * 7 * 7 * 256 * 9      # 7 = (14 + 2 - 2 - 1) // 2 + 1
    assert c.bytes == 2 * (10 * 256 * 14 * 14 + 512 * 256 * 9 + 10 * 512 * 7 * 7)
    assert not c.notes


def test_conv_without_strides_uses_the_neighbours_shape_and_says_so():
    c = op_cost("aten::cudnn_convolution", [[32, 3, 224, 224], [64, 3, 7, 7]],
                ["float", "float"], related=[112, 112])
    assert c.flops == 2 * 32 * 64 * 112 * 112 * 3 * 49
    assert "inferred" in c.notes[0]


def test_elementwise_out_argument_is_written_not_read():
    # 1.9-era relu: clamp_min(self, min, out): reads self once, writes out once
    n = 32 * 64 * 112 * 112
    c = op_cost("aten::clamp_min", [[32, 64, 112, 112], [], [32, 64, 112, 112]],
                ["float", "Int", "float"])
    assert c.bytes == 4 * 2 * n and c.flops == n
    add = op_cost("aten::add_", [[8, 8], [8, 8], []], ["float", "float", "Int"])
    assert add.bytes == 4 * 3 * 64


def test_unknown_ops_and_missing_shapes_are_uncounted():
    assert op_cost("aten::embedding_bag", [[10, 4]], ["float"]) is None
    assert op_cost("aten::mm", [[], []], ["", ""]) is None


def test_profiler_flops_override_the_shape_count():
    c = op_cost("aten::mm", [[4, 4], [4, 4]], ["float", "float"], flops_arg=1000)
    assert c.flops == 1000 and c.source == "profiler"


def test_machines_are_matched_by_name_and_memory():
    assert machine_for(A100_40).bw_bytes_s == 1555e9
    assert machine_for(A100_80).bw_bytes_s == 2039e9
    assert machine_for(V100).peaks["fp32"] == 15.7e12
    assert machine_for(H100).peaks["bf16"] == 989.5e12
    assert machine_for(MI300X).bw_bytes_s == 5300e9
    assert machine_for({"name": "Mystery GPU"}) is None
    user = machine_for({"name": "Mystery GPU"}, parse_peaks("fp32=10e12,bw=500e9"))
    assert user.peaks["fp32"] == 10e12 and "user" in user.source
    assert machine_for(V100, {"bw": 1e12}).bw_bytes_s == 1e12


@pytest.mark.parametrize("bad", ["fp33=1", "fp32=-1", "fp32", "bw=nan"])
def test_bad_peaks_are_refused(bad):
    with pytest.raises(ModelError):
        parse_peaks(bad)


def _kernel(klass, dur_us, flops, bytes_, dtype="fp32", phase="forward", family="matmul",
            out_bytes=0.0):
    from stepsim.calibration.op_costs import OpCost

    cost = OpCost(family, flops, bytes_, dtype, out_bytes=out_bytes)
    return KernelWork("k", klass, phase, dur_us, 1, "op", flops, bytes_, dtype, cost, klass)


GEMM_F = 2.0 * 4096 ** 3                 # 1.374e11 FLOP
GEMM_B = 3.0 * 4096 ** 2 * 4             # 201 MB, AI 683 FLOP/byte
EW_N = 2 ** 26
EW_F, EW_B = float(EW_N), 3.0 * EW_N * 4  # add of two fp32 tensors: AI 1/12


@pytest.mark.parametrize("gpu, dur_us, verdict, attained", [
    (A100_40, 10_000.0, "compute bound", GEMM_F / 19.5e12 / 10e-3),   # 0.70 of 19.5 TFLOP/s
    (V100, 10_000.0, "compute bound", GEMM_F / 15.7e12 / 10e-3),      # 0.88 of 15.7
    (H100, 10_000.0, "neither (occupancy)", GEMM_F / 67e12 / 10e-3),  # 0.21 of 67
])
def test_gemm_classification(gpu, dur_us, verdict, attained):
    r = roofline([_kernel("gemm", dur_us, GEMM_F, GEMM_B)], machine_for(gpu), 1)
    c = r.classes[0]
    assert c.bound == "compute" and c.verdict == verdict
    assert c.intensity == pytest.approx(GEMM_F / GEMM_B)
    assert c.attained == pytest.approx(attained)
    assert c.achieved_flops_s == pytest.approx(GEMM_F / 10e-3)


@pytest.mark.parametrize("gpu, verdict, attained", [
    (A100_40, "bandwidth bound", EW_B / 1555e9 / 600e-6),            # 0.86
    (MI300X, "neither (occupancy)", EW_B / 5300e9 / 600e-6),         # 0.25
])
def test_elementwise_classification(gpu, verdict, attained):
    r = roofline([_kernel("elementwise", 600.0, EW_F, EW_B, family="elementwise")],
                 machine_for(gpu), 1)
    c = r.classes[0]
    assert c.bound == "bandwidth" and c.verdict == verdict
    assert c.attained == pytest.approx(attained)
    assert c.achieved_bytes_s == pytest.approx(EW_B / 600e-6)


def test_short_kernels_below_their_roof_are_latency_bound():
    ks = [_kernel("elementwise", 4.0, 1e3, 1.2e4, family="elementwise") for _ in range(100)]
    assert roofline(ks, machine_for(A100_40), 1).classes[0].verdict == "neither (latency/launch)"


def test_fp32_above_its_peak_takes_the_tf32_roof_on_ampere():
    # 1.374e11 FLOP in 3 ms = 45.8 TFLOP/s > 19.5 FP32: TF32 tensor cores (156)
    c = roofline([_kernel("conv", 3000.0, GEMM_F, GEMM_B)], machine_for(A100_40), 1).classes[0]
    assert c.peak_key == "tf32" and c.attained == pytest.approx(GEMM_F / 156e12 / 3e-3)


def test_mixed_precision_factor_keeps_the_attained_fraction():
    # V100: 10 ms FP32 GEMM at 0.875 of 15.7 TF; FP16 roof 125 TF, bytes halve:
    # roof 1.374e11/125e12 = 1.099 ms (vs bandwidth 0.112 ms): new time 10 ms * 1.099/8.75
    r = roofline([_kernel("gemm", 10_000.0, GEMM_F, GEMM_B)], machine_for(V100), 1)
    g = mixed_precision_factor(r)
    assert g.factor == pytest.approx((GEMM_F / 125e12) / (GEMM_F / 15.7e12))
    assert g.floor_us == pytest.approx(GEMM_F / 125e12 * 1e6)
    already = roofline([_kernel("gemm", 10_000.0, GEMM_F, GEMM_B, dtype="bf16")],
                       machine_for(A100_40), 1)
    assert mixed_precision_factor(already) is None


def test_fusion_factor_removes_the_intermediate_traffic():
    # relu(x + y) as two ops over n floats: add reads 2n writes n, relu reads n writes n;
    # fused: the intermediate n is neither written nor read: 5n -> 3n
    n = 1 << 24
    add = _kernel("elementwise", 200.0, n, 12.0 * n, family="elementwise", out_bytes=4.0 * n)
    relu = _kernel("elementwise", 134.0, n, 8.0 * n, family="elementwise", out_bytes=4.0 * n)
    r = roofline([add, relu], machine_for(A100_40), 1)
    g = fusion_factor([add, relu], r, 1)
    assert g.factor == pytest.approx(3 / 5)
    assert g.floor_us == pytest.approx(12.0 * n / 1555e9 * 1e6)


def test_a_lambda_in_a_kernel_name_is_not_the_lamb_optimizer():
    from stepsim.calibration.gpu import categorize

    relu = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
            "namespace)::clamp_min_scalar_kernel_impl(at::TensorIterator&, c10::Scalar)::"
            "{lambda()#1}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >")
    assert categorize(relu, "kernel") == "elementwise"
    assert categorize("void multi_tensor_apply_kernel<LAMBStage1Functor>", "kernel") == "optimizer"
