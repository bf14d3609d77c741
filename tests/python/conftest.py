import os
import sys

# The tests' helper modules (models, export_util) sit beside them; the example's model in examples/.
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

# Each test captures what it runs (the capture cache's own tests name a folder of their own).
os.environ["ONNXTRAIN_CAPTURE_CACHE"] = "0"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state, so that a failure comes back on the next run."""
    torch.manual_seed(0)
    np.random.seed(0)
