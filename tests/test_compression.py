"""Wire compression (fp16, bf16, int8, fp8): error against float64, identical bits on every rank,
pre-scaling."""

import numpy as np
import pytest
from harness import assert_all_succeeded, run_job

# Relative error bounds against the float64 sum. One rounding to the wire format per hop bounds
# the error by about (hops) x 2^-11 (fp16) or 2^-8 (bf16) relative to the partial sums; int8 and
# fp8 round to 1/127 of their block's largest value, or to e4m3's 3 bits of mantissa.
BOUNDS = {"fp16": 2e-3, "bf16": 1.6e-2, "int8": 2.5e-2, "fp8": 8e-2}


@pytest.mark.parametrize("size,transport", [(2, "tcp"), (3, "shm"), (4, "tcp")])
def test_compressed_allreduce(size, transport):
    outcomes = run_job(size, "compression.py", env={"RINGCOMM_TRANSPORT": transport}, deadline=120)
    assert_all_succeeded(outcomes)
    first = outcomes[0].result
    for outcome in outcomes:
        result = outcome.result
        for name, case in result["cases"].items():
            assert case["digest"] == first["cases"][name]["digest"], (outcome.rank, name)
        errors = dict(e.split(": ", 1) for e in result["errors"])
        assert all(v.startswith("ValueError") for v in errors.values()), errors
        assert "float32" in errors["int32"] and "sum or avg" in errors["max"]
        assert "ring" in errors["tree"] and "fp4" in errors["name"]
    cases = first["cases"]
    for compression, bound in BOUNDS.items():
        assert cases[f"{compression}/sum"]["error"] < bound, cases
        assert cases[f"{compression}/avg"]["error"] < bound, cases
    assert cases["fp16/sum-prescaled"]["error"] < BOUNDS["fp16"], cases
    # Without pre-scaling the partial sums leave fp16's range: infinities, an error of inf/NaN.
    overflowed = cases["fp16/sum-overflowing"]["error"]
    assert overflowed is None or overflowed > 1.0, cases


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8", "fp8"])
def test_error_feedback_in_one_pass_matches_the_steps(codec):
    # _core.feed_back_error is x += residual, round x to the wire, keep what rounding took away:
    # the same bits as those steps one after another, over pieces of the array (its pieces
    # must make the 8-bit codecs' blocks of one run).
    from ringcomm import _core

    compression = _core.parse_compression(codec)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(100_003, dtype=np.float32)
    residual = np.zeros_like(x)
    expected_x, expected_residual = x.copy(), residual.copy()
    for step in range(3):
        gradient = rng.standard_normal(x.size, dtype=np.float32) * np.float32(10.0**step)
        x[...] = gradient
        expected_x[...] = gradient
        _core.feed_back_error(x, residual, compression)
        expected_x += expected_residual
        rounded = expected_x.copy()
        _core.round_to_wire(rounded, compression)
        expected_residual[...] = expected_x - rounded
        expected_x[...] = rounded
        assert np.array_equal(x.view(np.int32), expected_x.view(np.int32)), step
        assert np.array_equal(residual.view(np.int32), expected_residual.view(np.int32)), step
    with pytest.raises(ValueError, match="feed_back_error: x and residual"):
        _core.feed_back_error(x, residual[:5], compression)


@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_non_finite_value_spoils_only_itself(size):
    # One rank's inf, -inf or NaN at one place, or a sum that overflows float32 at a hop, through
    # int8 and fp8 (tests/workers/compression_nonfinite.py): the result is non-finite there alone,
    # as float32's (int8) or NaN (fp8, e4m3 has no infinity); the values more than a block away
    # are those of the same all-reduce without it, its neighbours finite and near the sum; every
    # rank the same bits. Before, the special value's whole block of 32 was NaN: 21 of 63 values
    # on 3 ranks.
    outcomes = run_job(size, "compression_nonfinite.py", deadline=180)
    assert_all_succeeded(outcomes)
    first = outcomes[0].result["cases"]
    for outcome in outcomes:
        for name, case in outcome.result["cases"].items():
            assert case["digest"] == first[name]["digest"], (outcome.rank, name)
    for name, case in first.items():
        compression, _, special, at = name.split("/")
        assert case["nonfinite"] == [int(at)], (name, case)
        expected = case["float32"] if compression == "int8" else "nan"
        assert case["kinds"] == [expected], (name, case)
        assert case["float32"] == ("inf" if special == "overflow" else special), (name, case)
        assert case["far_unchanged"] and case["near_ok"], (name, case)


@pytest.mark.parametrize("codec", ["int8", "fp8"])
def test_error_feedback_keeps_no_non_finite_residual(codec):
    # A gradient with an infinity (a step torch's GradScaler skips) goes on as it is, and leaves a
    # residual of 0 there: kept, inf - inf = NaN would make the next steps' gradients NaN too.
    # Both paths: the core's one pass (contiguous float32) and the steps in torch (a strided view).
    torch = pytest.importorskip("torch")
    from ringcomm._error_feedback import feed_back

    for contiguous in (True, False):
        storage = torch.randn(2, 4000, generator=torch.Generator().manual_seed(1))
        grad = storage[0] if contiguous else storage[:, ::2].reshape(-1)[::2]
        grad[7] = float("inf")
        residuals = {}
        feed_back(grad, residuals, "bucket", codec)
        assert not torch.isfinite(grad[7]), contiguous
        assert torch.isfinite(residuals["bucket"]).all() and residuals["bucket"][7] == 0, contiguous
        grad.copy_(torch.randn(grad.shape, generator=torch.Generator().manual_seed(2)))
        feed_back(grad, residuals, "bucket", codec)
        assert torch.isfinite(grad).all(), contiguous
