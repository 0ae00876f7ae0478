"""What every GPU-tier test shares: the skip when no CUDA device is visible."""

from __future__ import annotations

import pytest
import torch

NO_CUDA = (
    "no CUDA device: torch.cuda.is_available() is false (the GPU tier, `make test-gpu`, "
    "runs on a machine with an NVIDIA GPU and a CUDA build of torch)"
)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
