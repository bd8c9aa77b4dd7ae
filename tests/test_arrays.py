import numpy as np
import pytest

from collsynth.arrays import unique


@pytest.mark.parametrize("hi", [1, 3, 1000, 2**40])
@pytest.mark.parametrize("n", [0, 1, 2, 57, 5000])
def test_unique_equals_numpys(n, hi):
    x = np.random.default_rng(n + hi).integers(-hi, hi, n)
    got = unique(x)
    assert got.dtype == x.dtype
    assert np.array_equal(got, np.unique(x))


def test_unique_of_floats_and_nested_shapes():
    x = np.array([[3.0, 1.0], [3.0, -0.5]])
    assert np.array_equal(unique(x), [-0.5, 1.0, 3.0])
    assert np.array_equal(unique([2, 2, 1]), [1, 2])
