"""The Figure 2 example runs end to end in its tiny mode and writes its figure."""

import os
import sys

import pytest

pytest.importorskip("matplotlib")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def test_subnet_regression_quick(tmp_path, capsys):
    import subnet_regression

    out = tmp_path / "fig.png"
    between = subnet_regression.main(["--quick", "--steps", "60", "--out", str(out)])
    assert out.exists() and out.stat().st_size > 1000
    text = capsys.readouterr().out
    for label in ["Wasserstein 50%", "random 1%", "full covariance", "diagonal", "MAP"]:
        assert label in text and label in between
    # the noise is a floor of every predictive std; the full posterior adds to it
    assert all(v >= 0.1 - 1e-6 for v in between.values())
    assert between["full covariance"] > between["MAP"]
