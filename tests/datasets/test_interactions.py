"""Readers of interaction files: formats, header detection, id maps, threshold, errors, round trips."""

from __future__ import annotations

import numpy as np
import pytest

from dptensor.datasets import Interactions, read_interactions, write_interactions


def write(tmp_path, text, name="data.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def dense(data):
    return data.matrix.toarray().astype(int).tolist()


def test_csv_with_header_and_string_ids(tmp_path):
    path = write(tmp_path, "user,item,rating\nbob,x,5\nann,y,3\nann,x,1\n")
    data = read_interactions(path)
    assert isinstance(data, Interactions)
    assert data.user_ids.tolist() == ["ann", "bob"] and data.item_ids.tolist() == ["x", "y"]
    assert dense(data) == [[1, 1], [1, 0]]
    assert data.values.toarray().tolist() == [[1.0, 3.0], [5.0, 0.0]]
    assert data.binarisation == "every listed pair is an interaction (its rating is not used)"
    assert data.matrix.dtype == np.float64 and set(data.matrix.data.tolist()) == {1.0}
    assert repr(data) == ("Interactions(2 users x 2 items, 3 interactions; every listed pair is an "
                          "interaction (its rating is not used))")


def test_integer_ids_are_sorted_numerically(tmp_path):
    data = read_interactions(write(tmp_path, "10,2\n9,10\n100,2\n"))
    assert data.user_ids.tolist() == [9, 10, 100] and data.user_ids.dtype == np.int64
    assert data.item_ids.tolist() == [2, 10]
    assert dense(data) == [[0, 1], [1, 0], [1, 0]]
    assert data.values is None and data.binarisation == "every listed pair is an interaction"


@pytest.mark.parametrize(
    ("text", "users"),
    [
        ("user,item\nann,x\nbob,y\n", ["ann", "bob"]),  # names a user column
        ("alice,x\nbob,y\n", ["alice", "bob"]),  # string ids, no header
        ("who,what,rating\nalice,x,5\n", ["alice"]),  # a number below: a header
        ("u1,i1,5\nu2,i1,4\n", ["u1", "u2"]),  # a number in the first row: data
        ("# a comment\n\nuser_id,item_id\n1,2\n", [1]),
        ("alice,x\n", ["alice"]),  # one row of string ids

    ],
)
def test_header_detection(tmp_path, text, users):
    assert read_interactions(write(tmp_path, text)).user_ids.tolist() == users


def test_header_can_be_forced(tmp_path):
    path = write(tmp_path, "alice,x\nbob,y\n")
    assert read_interactions(path, header=True).user_ids.tolist() == ["bob"]
    named = write(tmp_path, "user,item\nann,x\n", "named.csv")
    assert read_interactions(named, header=False).user_ids.tolist() == ["ann", "user"]


def test_tsv_whitespace_and_semicolon(tmp_path):
    for text in ("1\t2\t5\n2\t1\t4\n", "1 2 5\n2 1 4\n", "1;2;5\n2;1;4\n"):
        data = read_interactions(write(tmp_path, text, "x.txt"))
        assert dense(data) == [[0, 1], [1, 0]]
        assert data.values.toarray().tolist() == [[0, 5], [4, 0]]
    tsv = write(tmp_path, "1\t2\n2\t1\n", "y.tsv")
    assert dense(read_interactions(tsv, format="tsv")) == [[0, 1], [1, 0]]


def test_threshold_keeps_the_catalogue(tmp_path):
    path = write(tmp_path, "user,item,rating\n1,1,5\n1,2,2\n2,3,4\n3,3,1\n")
    data = read_interactions(path, threshold=4)
    assert data.shape == (3, 3)  # user 3 and item 2 stay, without interactions
    assert dense(data) == [[1, 0, 0], [0, 0, 1], [0, 0, 0]]
    assert data.binarisation == "an interaction is a listed pair whose rating is >= 4"
    assert data.values.nnz == 4
    with pytest.raises(ValueError, match="threshold"):
        read_interactions(path, threshold=float("nan"))
    with pytest.raises(ValueError, match="needs a value column"):
        read_interactions(write(tmp_path, "1,2\n", "pairs.csv"), threshold=4)


def test_duplicates_count_once_with_the_largest_value(tmp_path):
    data = read_interactions(write(tmp_path, "1,1,2\n1,1,5\n1,1,3\n2,1,1\n"), threshold=4)
    assert data.n_interactions == 1 and data.values.toarray().tolist() == [[5.0], [1.0]]
    assert read_interactions(write(tmp_path, "a,b\na,b\n", "d.csv"), header=False).n_interactions == 1


def test_value_column_by_name_and_position(tmp_path):
    path = write(tmp_path, "user,item,timestamp,plays\n1,1,881250949,3\n1,2,881250950,0\n")
    assert read_interactions(path, value_column="plays", threshold=1).n_interactions == 1
    assert read_interactions(path, value_column=3, threshold=1).n_interactions == 1
    with pytest.raises(ValueError, match="'count' is not a column"):
        read_interactions(path, value_column="count")
    with pytest.raises(ValueError, match="the user or the item column"):
        read_interactions(path, value_column=1)
    with pytest.raises(ValueError, match="0-based position"):
        read_interactions(path, value_column=-1)


def test_recbole_inter(tmp_path):
    text = ("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
            "196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t302\t5\t881250950\n")
    path = write(tmp_path, text, "ml.inter")
    data = read_interactions(path, threshold=4)
    assert data.user_ids.tolist() == [186, 196] and data.item_ids.tolist() == [242, 302]
    assert dense(data) == [[0, 0], [0, 1]]
    assert read_interactions(path, format="recbole").n_interactions == 3
    # fields in another order, string tokens, no rating
    other = write(tmp_path, "timestamp:float\titem_id:token\tuser_id:token\n1\tb\tu\n2\ta\tu\n", "o.txt")
    data = read_interactions(other)
    assert data.user_ids.tolist() == ["u"] and data.item_ids.tolist() == ["a", "b"] and data.values is None
    with pytest.raises(ValueError, match="not a RecBole"):
        read_interactions(write(tmp_path, "1,2\n", "bad.inter"))


def test_movielens_udata(tmp_path):
    path = write(tmp_path, "196\t242\t3\t881250949\n186\t302\t5\t891717742\n", "u.data")
    data = read_interactions(path, format="movielens", threshold=4)
    assert data.user_ids.tolist() == [186, 196] and dense(data) == [[0, 1], [0, 0]]
    assert data.binarisation == "an interaction is a listed pair whose rating is >= 4"
    auto = read_interactions(path, threshold=4)  # read as its columns: the third is the value
    assert dense(auto) == dense(data)
    with pytest.raises(ValueError, match="4 columns"):
        read_interactions(write(tmp_path, "1\t2\t3\n", "short.data"), format="movielens")


def test_one_based_positions_and_shape(tmp_path):
    path = write(tmp_path, "1,3\n3,1\n")
    data = read_interactions(path, one_based=True)
    assert data.shape == (3, 3) and data.user_ids.tolist() == [1, 2, 3]
    assert dense(data) == [[0, 0, 1], [0, 0, 0], [1, 0, 0]]
    assert read_interactions(path, one_based=True, shape=(4, 5)).shape == (4, 5)
    assert read_interactions(path, one_based=False).shape == (4, 4)
    with pytest.raises(ValueError, match="outside shape"):
        read_interactions(path, one_based=True, shape=(2, 3))
    with pytest.raises(ValueError, match="one_based=False"):
        read_interactions(write(tmp_path, "0,1\n", "zero.csv"), one_based=True)
    with pytest.raises(ValueError, match="whole numbers"):
        read_interactions(write(tmp_path, "a,1\n", "s.csv"), one_based=True)
    with pytest.raises(ValueError, match="shape applies"):
        read_interactions(path, shape=(3, 3))
    with pytest.raises(ValueError, match="two positive integers"):
        read_interactions(path, one_based=True, shape=(3, 0))


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("user,item,rating\n1,2,5\n1,3,oops\n", "values \\(column 3, 'rating'\\) must be finite numbers"),
        ("user,item,rating\n1,2,5\n1,3,nan\n", "values .* must be finite numbers"),
        ("user,item,rating\n1,2,5\n1\n", "expected at least 3 columns"),
        ("user,item,rating\n1,2,5\n,3,4\n", "an empty user id \\(column 1, 'user'\\)"),
    ],
)
def test_bad_lines_name_the_line_unless_private(tmp_path, text, fault):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=f"data.csv, line 3: {fault}"):
        read_interactions(path)
    with pytest.raises(ValueError) as caught:
        read_interactions(path, private=True)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    tail = message[len(f"{path}: "):]
    assert "line" not in tail and "found" not in tail  # no position, no count
    assert "oops" not in tail and "nan" not in tail  # no cell quoted


def test_private_errors_quote_no_cell(tmp_path):
    path = write(tmp_path, "user,item,rating\n1,2,5\n1,3,secret-value\n")
    with pytest.raises(ValueError) as caught:
        read_interactions(path, private=True)
    tail = str(caught.value).replace(str(path), "")
    assert "secret" not in tail and "line" not in tail
    big = write(tmp_path, "1,8\n1,2\n", "big.csv")
    with pytest.raises(ValueError, match="the file needs 8"):
        read_interactions(big, one_based=True, shape=(1, 3))
    with pytest.raises(ValueError) as caught:
        read_interactions(big, one_based=True, shape=(1, 3), private=True)
    assert "8" not in str(caught.value).replace(str(big), "")


def test_other_refusals(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_interactions(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="no interactions"):
        read_interactions(write(tmp_path, "# nothing\n"))
    with pytest.raises(ValueError, match="no interactions"):
        read_interactions(write(tmp_path, "user,item\n", "header.csv"))
    with pytest.raises(ValueError, match="format"):
        read_interactions(write(tmp_path, "1,2\n"), format="json")
    with pytest.raises(TypeError, match="one_based"):
        read_interactions(write(tmp_path, "1,2\n"), one_based=1)


@pytest.mark.parametrize("threshold", [None, 4])
def test_round_trip(tmp_path, threshold):
    source = write(tmp_path, "user,item,rating\nann,x,5\nbob,y,1\nann,z,4.5\ncid,x,2\n")
    data = read_interactions(source, threshold=threshold)
    back = read_interactions(write_interactions(tmp_path / "out.csv", data), threshold=threshold)
    assert (back.matrix != data.matrix).nnz == 0 and (back.values != data.values).nnz == 0
    assert back.user_ids.tolist() == data.user_ids.tolist()
    assert back.item_ids.tolist() == data.item_ids.tolist()
    assert back.binarisation.replace("value", "rating") == data.binarisation
    pairs = read_interactions(write(tmp_path, "u,v\n1,2\n3,4\n", "pairs.csv"))
    again = read_interactions(write_interactions(tmp_path / "p.tsv", pairs, delimiter="\t"))
    assert (again.matrix != pairs.matrix).nnz == 0 and again.user_ids.tolist() == [1, 3]
