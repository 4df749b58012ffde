"""The engine dir's dtype names as torch dtypes (the contract names them; only torch code needs these)."""

import torch

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
