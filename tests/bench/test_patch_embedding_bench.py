"""benchmarks/patch_embedding.py runs: both ways of every embedding in both precisions, equal outputs checked
before anything is timed."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "patch_embedding.py"


@pytest.mark.slow
def test_the_patch_embedding_benchmark_times_both_ways():
    spec = importlib.util.spec_from_file_location("patch_embedding", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rows = script.main(["--rounds", "1", "--threads", "1"])
    assert len(rows) == 2 * 2 * len(script.EMBEDDINGS)
    assert {row["computed as"] for row in rows} == {"convolution", "product"}
    assert all(row["median ms"] > 0 for row in rows)
