"""Streaming readers and the orthogonal-moment stream generator."""

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.datasets.moment_stream import make_orthogonal_moment_stream
from dptensor.streams import (
    ArrayStream,
    CsvStream,
    GeneratorStream,
    NpyStream,
    SparseNpzStream,
    open_stream,
    rebatch,
)
from dptensor.tensor.operators import SampleMoment


@pytest.fixture
def matrix():
    return sp.random(103, 17, density=0.2, random_state=0, format="csr", dtype=np.float64)


def _stack(batches):
    return np.vstack([b.toarray() if sp.issparse(b) else b for b in batches])


@pytest.mark.parametrize("compressed", [True, False])
def test_sparse_npz_row_blocks(tmp_path, matrix, compressed):
    sp.save_npz(tmp_path / "x.npz", matrix, compressed=compressed)
    stream = open_stream(tmp_path / "x.npz", 10)
    assert isinstance(stream, SparseNpzStream) and stream.n_samples == 103 and stream.n_features == 17
    batches = list(stream)
    assert [b.shape[0] for b in batches] == [10] * 10 + [3]
    assert all(sp.isspmatrix_csr(b) and b.dtype == np.float64 for b in batches)
    np.testing.assert_array_equal(_stack(batches), matrix.toarray())
    np.testing.assert_array_equal(_stack(stream.iter_from(37)), matrix.toarray()[37:])
    assert list(stream.iter_from(103)) == []
    np.testing.assert_array_equal(_stack(stream), matrix.toarray())  # re-iterable


def test_sparse_npz_needs_csr_and_npz_single_dense_array(tmp_path, matrix):
    sp.save_npz(tmp_path / "c.npz", matrix.tocsc())
    with pytest.raises(ValueError, match="'csc' matrix; streaming row blocks needs CSR"):
        SparseNpzStream(tmp_path / "c.npz", 5)
    dense = matrix.toarray()
    np.savez_compressed(tmp_path / "d.npz", dense)
    stream = SparseNpzStream(tmp_path / "d.npz", 8)
    np.testing.assert_array_equal(_stack(stream), dense)
    np.testing.assert_array_equal(_stack(stream.iter_from(50)), dense[50:])
    np.savez(tmp_path / "two.npz", a=dense, b=dense)
    with pytest.raises(ValueError, match="neither a scipy.sparse"):
        SparseNpzStream(tmp_path / "two.npz", 5)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a valid .npz"):
        SparseNpzStream(tmp_path / "bad.npz", 5)


def test_npy_memory_mapped(tmp_path, matrix):
    dense = matrix.toarray().astype(np.float32)
    np.save(tmp_path / "x.npy", dense)
    stream = open_stream(tmp_path / "x.npy", 25)
    assert isinstance(stream, NpyStream) and stream.n_samples == 103
    batches = list(stream)
    assert all(b.dtype == np.float64 and not isinstance(b, np.memmap) for b in batches)
    np.testing.assert_array_equal(_stack(batches), dense)
    np.testing.assert_array_equal(_stack(stream.iter_from(99)), dense[99:])
    with pytest.raises(ValueError, match="start must be at most"):
        stream.iter_from(104)
    np.save(tmp_path / "cube.npy", np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="2-dimensional"):
        NpyStream(tmp_path / "cube.npy", 5)


@pytest.mark.parametrize(("suffix", "delimiter"), [(".csv", ","), (".tsv", "\t"), (".txt", " ")])
def test_csv_tsv_text(tmp_path, matrix, suffix, delimiter):
    dense = matrix.toarray()
    path = tmp_path / f"x{suffix}"
    np.savetxt(path, dense, delimiter=delimiter, header="a header line", comments="")
    with open(path, "a") as handle:
        handle.write("\n# a comment\n")
    stream = open_stream(path, 9, skip_header=1)
    assert isinstance(stream, CsvStream)
    batches = list(stream)
    assert [b.shape[0] for b in batches][-1] == 103 % 9
    np.testing.assert_allclose(_stack(batches), dense, rtol=1e-15)
    np.testing.assert_allclose(_stack(stream.iter_from(40)), dense[40:], rtol=1e-15)


def test_csv_errors(tmp_path):
    (tmp_path / "ragged.csv").write_text("1,2\n3,4\n5,6,7\n")
    with pytest.raises(ValueError, match="cannot parse data rows 0..2"):
        list(CsvStream(tmp_path / "ragged.csv", 5))
    with pytest.raises(ValueError, match="rows 2.. have 3 fields, earlier rows have 2"):
        list(CsvStream(tmp_path / "ragged.csv", 2))
    (tmp_path / "words.csv").write_text("1,x\n")
    with pytest.raises(ValueError, match="cannot parse"):
        list(CsvStream(tmp_path / "words.csv", 2))


def test_open_stream_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        open_stream(tmp_path / "missing.npy", 5)
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match="cannot stream a '.parquet' file"):
        open_stream(tmp_path / "x.parquet", 5)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        ArrayStream(np.ones((3, 3)), 0)


def test_generator_stream_and_rebatch(matrix):
    dense = matrix.toarray()
    rows = GeneratorStream(lambda: (row for row in dense), 16)
    assert rows.reiterable
    assert [b.shape for b in rows][:2] == [(16, 17), (16, 17)]
    np.testing.assert_array_equal(_stack(rows.iter_from(5)), dense[5:])
    blocks = [matrix[:5], matrix[5:50], matrix[50:51], matrix[51:]]
    out = list(rebatch(blocks, 20))
    assert [b.shape[0] for b in out] == [20] * 5 + [3] and all(sp.issparse(b) for b in out)
    np.testing.assert_array_equal(_stack(out), dense)
    mixed = list(rebatch([dense[:10], matrix[10:30], dense[30]], 8, skip=3))
    np.testing.assert_array_equal(_stack(mixed), dense[3:31])
    once = GeneratorStream((row for row in dense), 50)
    assert not once.reiterable
    assert len(list(once)) == 3
    with pytest.raises(TypeError, match="one-shot iterator"):
        list(once)
    with pytest.raises(ValueError, match="item 1 of the stream has 3 columns, earlier items have 2"):
        list(rebatch([np.ones((2, 2)), np.ones((2, 3))], 10))
    with pytest.raises(ValueError, match="row or a 2-D block"):
        list(rebatch([np.ones((2, 2, 2))], 10))
    with pytest.raises(TypeError, match="source must be an iterable"):
        GeneratorStream(3, 5)


def test_array_stream_slices(matrix):
    stream = ArrayStream(matrix.tocoo(), 30)
    assert stream.n_samples == 103 and stream.n_features == 17
    np.testing.assert_array_equal(_stack(stream.iter_from(10)), matrix.toarray()[10:])
    with pytest.raises(ValueError, match="2-dimensional"):
        ArrayStream(np.ones(3), 2)


# --------------------------------------------------- orthogonal moment stream
@pytest.mark.parametrize("sparse", [False, True])
def test_moment_stream_third_moment_is_the_low_rank_tensor(sparse):
    kwargs = dict(support=3, noise_density=0.2) if sparse else {}
    stream = make_orthogonal_moment_stream(
        12, 3, weights=[1.0, 0.6, 0.3], noise=0.2, random_state=0, **kwargs
    )
    np.testing.assert_allclose(stream.factors.T @ stream.factors, np.eye(3), atol=1e-12)
    X = stream.sample(200_000)
    assert sp.issparse(X) == sparse
    vectors = np.column_stack([stream.factors, np.random.default_rng(1).standard_normal((12, 3))])
    vectors /= np.linalg.norm(vectors, axis=0)
    estimate = SampleMoment(X).contract_pair(vectors)
    truth = stream.moment().contract_pair(vectors)
    # Monte Carlo error ~ sqrt(E[(x'u)^4 x_i^2] / n) ~ 0.005 here; 0.03 is > 5 standard errors
    # and well below the largest entries of the truth (lambda_i |v_i| >= 0.3 / sqrt(12) ... 0.58).
    assert np.max(np.abs(estimate - truth)) < 0.03
    assert np.max(np.abs(truth)) > 0.4
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=0.01)


def test_moment_stream_batches_and_errors():
    stream = make_orthogonal_moment_stream(20, 2, random_state=0)
    assert [b.shape for b in stream.batches(7, 3)] == [(7, 20)] * 3
    np.testing.assert_array_equal(stream.weights, [1.0, 0.5])
    same = make_orthogonal_moment_stream(20, 2, random_state=0)
    np.testing.assert_array_equal(
        make_orthogonal_moment_stream(20, 2, random_state=0).sample(4), same.sample(4)
    )
    with pytest.raises(ValueError, match="support \\* rank must be at most dim=20"):
        make_orthogonal_moment_stream(20, 3, support=7)
    with pytest.raises(ValueError, match="weights must be positive"):
        make_orthogonal_moment_stream(20, 2, weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="weights must have 2 entries"):
        make_orthogonal_moment_stream(20, 2, weights=[1.0])
    with pytest.raises(ValueError, match="skew must lie strictly between 0 and 1/2"):
        make_orthogonal_moment_stream(20, 2, skew=0.5)
    with pytest.raises(ValueError, match="noise_density must lie in"):
        make_orthogonal_moment_stream(20, 2, noise_density=0.0)
    with pytest.raises(ValueError, match="noise must be >= 0"):
        make_orthogonal_moment_stream(20, 2, noise=-1.0)
    with pytest.raises(ValueError, match="rank must be at most"):
        make_orthogonal_moment_stream(2, 3)
