# Until tests/conftest.py registers `pytest_plugins = ["tests.fixtures.triton"]` (then delete this file).
from tests.fixtures.triton import *  # noqa: F403
