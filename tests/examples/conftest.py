"""Fixtures for the example-script tests (helpers live in example_helpers.py)."""

import pytest
from example_helpers import CUDA_GPUS


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """Every parity test runs on CPU/gloo, and on CUDA/NCCL where GPUs exist."""
    if request.param == "cuda" and CUDA_GPUS < 2:
        pytest.skip("needs 2 CUDA GPUs")
    return request.param
