"""The one table of numerical tolerances used by the tests.

Every entry says why it has the value it has. Change a value only with a reason written here.
"""

# float64 theory identities (pure algebra, no iteration): rounding only.
F64_EXACT_RTOL = 1e-10
# float32 versions of the same identities on O(1) numbers.
F32_EXACT_RTOL = 1e-5
# float32 single ops (norms, RoPE, one matmul) against a torch reference.
F32_OP_ATOL = 1e-5
# float32 whole models (a few layers of accumulation) against a torch reference.
F32_MODEL_ATOL = 1e-4
# bf16 parameters with fp32 softmax/loss: bf16 has 8 mantissa bits (~4e-3 relative).
BF16_MODEL_ATOL = 5e-2
# float64 SGD/flow identities that hold to O(step²) per step: checked at small steps, relative.
F64_FLOW_RTOL = 1e-8
