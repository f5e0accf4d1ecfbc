"""The test suite's own machinery under pytest-xdist (`-n N`, README): which tests go to one worker
together, and each worker's caches its own."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from conftest import shared_fixture_scope, sharing_tests

MODULE = '''
import pytest

@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return 1

@pytest.fixture
def checkout(history):  # a per-test fixture over the shared one shares it
    return history

@pytest.fixture(scope="session")
def interpreter():
    return 2

def test_reads_the_history(history):
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_through_a_checkout(checkout, n):
    pass

@pytest.mark.usefixtures("history")
class TestGrouped:
    def test_in_a_class(self):
        pass

@pytest.mark.usefixtures("history")
def test_by_usefixtures():
    pass

def test_alone(tmp_path, interpreter):
    pass
'''


def test_the_tests_sharing_a_modules_fixture_go_to_one_worker_and_the_rest_anywhere(tmp_path):
    module = tmp_path / "test_sample.py"
    module.write_text(MODULE)
    assert sharing_tests(module) == {"test_reads_the_history", "test_through_a_checkout",
                                              "test_by_usefixtures"}
    scope = {name: shared_fixture_scope(tmp_path, f"test_sample.py::{name}")
             for name in ("test_reads_the_history", "test_through_a_checkout[2]", "test_by_usefixtures",
                          "test_alone")}
    assert scope == {"test_reads_the_history": "test_sample.py", "test_through_a_checkout[2]": "test_sample.py",
                     "test_by_usefixtures": "test_sample.py", "test_alone": "test_sample.py::test_alone"}
    # A class's usefixtures is not read: its tests are handed out one by one (each builds the
    # module's fixture where it runs: slower, never wrong).
    assert shared_fixture_scope(tmp_path, "test_sample.py::TestGrouped::test_in_a_class").endswith("test_in_a_class")


def test_an_autouse_shared_fixture_or_an_unreadable_module_keeps_the_whole_module_together(tmp_path):
    autouse = tmp_path / "test_autouse.py"
    autouse.write_text(textwrap.dedent('''
        import pytest
        @pytest.fixture(scope="module", autouse=True)
        def server():
            yield
        def test_one():
            pass
    '''))
    broken = tmp_path / "test_broken.py"
    broken.write_text("def test_(:\n")
    assert sharing_tests(autouse) == {"*"} == sharing_tests(broken)
    assert shared_fixture_scope(tmp_path, "test_broken.py::test_x") == "test_broken.py"


def test_each_test_process_keeps_its_caches_in_its_own_temporary_directory(tmp_path_factory):
    """matplotlib's font list and anything else under $XDG_CACHE_HOME: per worker, never one
    file that parallel workers (and the processes they start) write at once."""
    root = tmp_path_factory.getbasetemp()
    for name in ("XDG_CACHE_HOME", "MPLCONFIGDIR"):
        assert Path(os.environ[name]).parent == root and Path(os.environ[name]).is_dir()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:  # under -n, xdist gives each worker a basetemp of its own
        assert root.name == f"popen-{worker}"
