"""paddle_compat.parity.pdio: reading paddle.save's files without Paddle, and refusing anything else.

The files are built here the way paddle.save 3.3.1 writes them (tests/parity/test_parity_kit.py
reads files written by the real paddle.save)."""

from __future__ import annotations

import collections
import io
import os
import pickle

import numpy as np
import pytest

from paddle_compat.parity import pdio
from paddle_compat.parity.pdio import UnsafePickleError


class TensorLike:
    """Pickles as paddle.save reduces a tensor in a nested object: tuple((name, array))."""

    def __init__(self, name: str, data: np.ndarray) -> None:
        self.name, self.data = name, data

    def __reduce__(self):
        return (tuple, ((self.name, self.data),))


class DenseTensorLike:
    """Pickles as paddle.save reduces a raw DenseTensor: eval("data", {"data": array})."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    def __reduce__(self):
        return (eval, ("data", {"data": self.data}))


def _bytes(obj, protocol=4) -> bytes:
    return pickle.dumps(obj, protocol=protocol)


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_layer_state_dict(protocol):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    saved = {
        "0.weight": w,
        "0.bias": np.ones(4, np.float32),
        "emb": np.arange(6, dtype=np.uint16),
        pdio.NAME_TABLE: {"0.weight": "linear_0.w_0", "0.bias": "linear_0.b_0"},
    }
    data = _bytes(saved, protocol)
    loaded = pdio.load(data)
    assert list(loaded) == ["0.weight", "0.bias", "emb"]
    np.testing.assert_array_equal(loaded["0.weight"], w)
    assert loaded["emb"].dtype == np.uint16  # bfloat16's bits, as Paddle keeps them
    assert pdio.parameter_names(data) == {"0.weight": "linear_0.w_0", "0.bias": "linear_0.b_0"}


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_optimizer_state_with_master_weights_and_scheduler(protocol):
    saved = {
        "linear_0.w_0_moment1_0": TensorLike("linear_0.w_0_moment1_0", np.ones((2, 2), np.float32)),
        "master_weights": {"linear_0.w_0": TensorLike("linear_0.w_0_fp32_master_0", np.zeros((2, 2), np.float32))},
        "LR_Scheduler": {"last_epoch": 3, "last_lr": 0.1, "best": np.float32(0.5)},
        "nested": [collections.OrderedDict(a=TensorLike("t", np.ones(1))), DenseTensorLike(np.arange(3)), b"raw"],
    }
    loaded = pdio.load(_bytes(saved, protocol))
    np.testing.assert_array_equal(loaded["linear_0.w_0_moment1_0"], np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(loaded["master_weights"]["linear_0.w_0"], np.zeros((2, 2)))
    assert loaded["LR_Scheduler"] == {"last_epoch": 3, "last_lr": 0.1, "best": np.float32(0.5)}
    assert isinstance(loaded["nested"][0], collections.OrderedDict)
    np.testing.assert_array_equal(loaded["nested"][1], np.arange(3))
    assert loaded["nested"][2] == b"raw"


def test_big_parameters_are_joined():
    """protocol 2/3: paddle.save splits arrays over 1 GiB into slices listed under UnpackBigParamInfor@@."""
    w = np.arange(10, dtype=np.float32).reshape(2, 5)
    saved = {
        "w@@.0": w.reshape(-1)[:6],
        "w@@.1": w.reshape(-1)[6:],
        "b": np.ones(2),
        "UnpackBigParamInfor@@": {"w": {"OriginShape": (2, 5), "slices": ["w@@.0", "w@@.1"]}},
    }
    loaded = pdio.load(_bytes(saved, 2))
    assert sorted(loaded) == ["b", "w"]
    np.testing.assert_array_equal(loaded["w"], w)


def test_files_and_file_objects(tmp_path):
    path = tmp_path / "m.pdparams"
    path.write_bytes(_bytes({"w": np.ones(2)}))
    for source in (path, str(path), io.BytesIO(path.read_bytes())):
        np.testing.assert_array_equal(pdio.load(source)["w"], np.ones(2))


def test_save_round_trip(tmp_path):
    path = tmp_path / "x.pdopt"
    obj = {
        "a": np.arange(3, dtype=np.float32),
        "master_weights": {"p": np.ones(2)},
        "LR_Scheduler": {"last_epoch": 1, "last_lr": 0.5},
    }
    pdio.save(obj, path, parameter_names={"a": "p"})
    loaded = pdio.load(path)
    assert sorted(loaded) == ["LR_Scheduler", "a", "master_weights"]
    assert pdio.parameter_names(path) == {"a": "p"}
    with pytest.raises(TypeError, match=r"obj\['f'\]: object is not a numpy array"):
        pdio.save({"f": object()}, path)
    with pytest.raises(UnsafePickleError, match="Python objects inside"):
        pdio.save({"o": np.array([object()])}, path)
    with pytest.raises(ValueError, match="no 'StructuredToParameterName@@' table"):
        pdio.parameter_names({"w": np.ones(1)})


# ----------------------------------------------------------------------------------- refused


class RunsCommand:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class CallsEval:
    def __reduce__(self):
        return (eval, ("__import__('os').getcwd()", {}))


class OtherArray:
    """numpy's array rebuilder asked for another type (one the unpickler does let through)."""

    def __reduce__(self):
        from numpy._core.multiarray import _reconstruct

        return (_reconstruct, (collections.OrderedDict, (0,), b"b"))


def test_arbitrary_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(UnsafePickleError, match=r"refusing to load (posix|os)\.system"):
        pdio.load(_bytes({"w": np.ones(1), "x": RunsCommand(str(marker))}))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (CallsEval(), "eval is only allowed as paddle.save's DenseTensor form"),
        (OtherArray(), "only plain numpy arrays are allowed"),
        (np.array([1, "x"], dtype=object), "Python objects inside"),
        (collections.Counter(a=1), "refusing to load collections.Counter"),
        (np.float32, "refusing to load numpy.float32"),
        (np.ma.array([1.0], mask=[False]), "refusing to load numpy.ma.core"),
    ],
    ids=["eval", "array-subclass", "object-array", "counter", "global", "masked-array"],
)
def test_unsafe_payloads(payload, message):
    with pytest.raises(UnsafePickleError, match=message):
        pdio.load(_bytes({"x": payload}))


def test_persistent_ids_are_refused():
    class WithPid(pickle.Pickler):
        def persistent_id(self, obj):
            return "pid" if isinstance(obj, str) and obj == "ref" else None

    buf = io.BytesIO()
    WithPid(buf, protocol=4).dump({"x": "ref"})
    with pytest.raises(UnsafePickleError, match="persistent id"):
        pdio.load(buf.getvalue())


# ----------------------------------------------------------------------------------- damaged files


def test_corrupt_frame_length_is_refused_before_allocating(tmp_path):
    """A 30-byte file whose pickle frame claims 2**62 bytes: the unpickler would reserve them."""
    path = tmp_path / "bad.pdparams"
    path.write_bytes((b"\x80\x04\x95" + (2**62).to_bytes(8, "little") + b"}q\x00.").ljust(30, b"\x00"))
    with pytest.raises(pdio.CorruptFileError, match=r"bad\.pdparams is not a whole paddle.save file.*a frame of"):
        pdio.load(path)
    with pytest.raises(ValueError, match="the given bytes"):  # CorruptFileError is a ValueError
        pdio.load(path.read_bytes())


@pytest.mark.parametrize("cut", [0, 1, 12, 0.5, -1])
def test_truncated_files_name_the_file(tmp_path, cut):
    data = _bytes({"w": np.ones((64, 64), np.float32), "b": np.zeros(3)})
    path = tmp_path / "m.pdopt"
    path.write_bytes(data[: int(len(data) * cut) if isinstance(cut, float) else cut])
    with pytest.raises(pdio.CorruptFileError, match=r"m\.pdopt"):
        pdio.load(path)
    with pytest.raises(pdio.CorruptFileError, match=r"m\.pdopt"):
        pdio.parameter_names(path)


def test_array_larger_than_its_data_is_refused():
    class Huge:
        def __reduce__(self):
            from numpy._core.multiarray import _reconstruct

            return (_reconstruct, (np.ndarray, (0,), b"b"), (1, (2**40,), np.dtype("float32"), False, b"abcd"))

    with pytest.raises(pdio.CorruptFileError, match="buffer size does not match"):
        pdio.load(_bytes({"w": Huge()}))


def test_unsafe_file_names_the_file(tmp_path):
    path = tmp_path / "evil.pdparams"
    path.write_bytes(_bytes({"x": collections.Counter(a=1)}))
    with pytest.raises(UnsafePickleError, match=r"evil\.pdparams: refusing to load collections\.Counter"):
        pdio.load(path)


def test_source_type_is_checked():
    with pytest.raises(TypeError, match="source must be a path, bytes or a binary file object"):
        pdio.load(42)
    with pytest.raises(TypeError, match="binary mode"):
        pdio.load(io.StringIO("x"))
