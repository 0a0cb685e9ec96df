"""Where the tests find their data: the module under test (PYTHONPATH=build/python), the programs
built beside it (build/bin, or MINIMIND_BIN_DIR), the demo model, and ../shared (the real
tokenizers and golden cases; MINIMIND_SHARED_DIR moves it). Data that is absent makes a test
skip, or fail under CI=true, as the C++ tests do (tests/skips.hpp)."""
import os
import pathlib

import pytest

import minimind

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "models" / "demo"
SHARED = pathlib.Path(os.environ.get("MINIMIND_SHARED_DIR", ROOT.parent / "shared"))
BIN = pathlib.Path(os.environ.get("MINIMIND_BIN_DIR", pathlib.Path(minimind.__file__).resolve().parent.parent / "bin"))


def require(path, what):
    """The path, or the calling test skipped (failed under CI=true) because it is absent."""
    path = pathlib.Path(path)
    if not path.exists():
        why = f"{what} is absent: {path}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, yet {why}")
        pytest.skip(why)
    return path


def program(name):
    return require(BIN / name, f"the program {name} (build it: cmake --build build --target {name})")


@pytest.fixture(scope="session")
def demo():
    return minimind.load(DEMO, threads=1)
