"""The ``equivalence`` fixture: a test records what it compared with the authors' code, and the run's summary
prints one line per comparison (``tests/conftest.py``)."""

import pytest

from ..conftest import EQUIVALENCE_PROPERTY


@pytest.fixture
def equivalence(request, record_property):
    """``equivalence(compared, differences=())``: this test compared ``compared`` cases with the authors' code
    and they agreed within the stated tolerance, except the named ``differences`` (each a short reason)."""

    def record(compared: int, differences=()):
        name = request.node.name
        record_property(EQUIVALENCE_PROPERTY, (name, int(compared), list(differences)))

    return record
