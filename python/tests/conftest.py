"""Fixtures for the sinkscope Python tests: the shipped stories260K model, the CLI binary from the
same build (SINKSCOPE_CLI, set by CTest), and a small training run for trace."""

import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(os.environ.get("SINKSCOPE_REPO", pathlib.Path(__file__).resolve().parents[2]))
MODEL = REPO / "models" / "stories260K" / "stories260K.bin"


def cli_path():
    path = os.environ.get("SINKSCOPE_CLI", str(REPO / "build" / "src" / "cli" / "sinkscope"))
    if not os.path.exists(path):
        pytest.skip(f"the sinkscope CLI is not built at {path} (set SINKSCOPE_CLI)")
    return path


def run_cli(*args, check=True):
    """Runs the CLI (one thread, as the Python side runs with the same thread count) and returns
    the completed process."""
    proc = subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"sinkscope {' '.join(map(str, args))} failed:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def sinkscope():
    import sinkscope as ss
    return ss


@pytest.fixture(scope="session")
def model(sinkscope):
    return sinkscope.load(MODEL)


@pytest.fixture(scope="session")
def train_run(tmp_path_factory):
    """Six steps of the quick preset with a checkpoint every 2 (step-2, step-4, step-6)."""
    run = tmp_path_factory.mktemp("run") / "quick"
    run_cli("train", "--preset", "quick", "--steps", 6, "--checkpoint-every", 2, "--eval-every", 6,
            "--threads", 1, "--out", run)
    return run


def load_json(path):
    with open(path) as f:
        return json.load(f)
