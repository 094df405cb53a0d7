"""The Figure 2 example runs end to end in its tiny mode and writes its figure."""

import os
import sys

import pytest

pytest.importorskip("matplotlib")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def test_subnet_regression_quick(tmp_path, capsys):
    import subnet_regression

    out = tmp_path / "fig.png"
    mean = subnet_regression.main(["--quick", "--steps", "60", "--random-draws", "1", "--out", str(out)])
    assert out.exists() and out.stat().st_size > 1000
    text = capsys.readouterr().out
    for label in ["predictive 50%", "wasserstein 10%", "random 10%", "full", "diagonal", "MAP"]:
        assert label in text and label in mean
    # the fitted noise is a floor of every predictive std; the full posterior adds to it
    noise = mean["MAP"]["gap std"]
    assert all(m[k] >= noise - 1e-6 for m in mean.values() for k in ("gap std", "outside std"))
    assert mean["full"]["outside std"] > noise
