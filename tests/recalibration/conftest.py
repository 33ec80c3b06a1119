"""Fixtures shared by the recalibration tests."""

import pytest
import torch


@pytest.fixture
def one_thread():
    """The authors' temperature loop takes thousands of tiny steps; on a busy machine a second thread only adds
    contention."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
