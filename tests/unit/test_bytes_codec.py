"""The one BYTES codec writes what tritonclient writes and reads it back, on both of its paths (a
loop for few elements, numpy for many, and the one for elements all of one length), and refuses a
malformed buffer with one error naming the tensor, never another exception."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.utils as client_utils
from hypothesis import given, settings
from hypothesis import strategies as st

from server.protocol import bytes_codec
from server.protocol.errors import ErrorCode, TritonError

MANY = 200  # past the loop's limit, so numpy's path runs


def object_array(items: list[Any]) -> np.ndarray[Any, Any]:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def test_elements_are_length_prefixed_little_endian() -> None:
    data = bytes_codec.serialize(np.array([[b"ab", "\u00e9"], [b"", 7]], dtype=object))
    assert data == b"\x02\x00\x00\x00ab\x02\x00\x00\x00\xc3\xa9\x00\x00\x00\x00\x01\x00\x00\x007"
    assert bytes_codec.deserialize(data) == [b"ab", "\u00e9".encode(), b"", b"7"]
    assert bytes_codec.serialize([]) == b"" and bytes_codec.deserialize(b"") == []


@pytest.mark.parametrize("count", [1, MANY])
@pytest.mark.parametrize(
    "make",
    [
        lambda i: f"s{i}".encode(),  # only bytes
        lambda i: f"\u00e9{i}",  # only str
        lambda i: [f"s{i}".encode(), f"t{i}", i, 2.5][i % 4],  # mixed: others as their str()
    ],
    ids=["bytes", "str", "mixed"],
)
def test_serialize_matches_tritonclient(count: int, make: Any) -> None:
    items = [make(i) for i in range(count)]
    expected = client_utils.serialize_byte_tensor(object_array(items)).item()
    assert bytes_codec.serialize(object_array(items)) == expected
    assert bytes_codec.serialize(items) == expected  # a plain list too


@pytest.mark.parametrize("count", [1, MANY])
def test_bytes_like_elements_go_as_their_bytes(count: int) -> None:
    """bytearray, memoryview and numpy's bytes_ are bytes to a model author (tritonclient would write
    their repr: tcli keeps what its server always did)."""
    items = [bytearray(b"ba"), memoryview(b"mv"), np.bytes_(b"nb")] * count
    assert (
        bytes_codec.deserialize(bytes_codec.serialize(object_array(items))) == [b"ba", b"mv", b"nb"] * count
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=30), max_size=MANY + 20))
def test_round_trip_and_tritonclient_reads_it(items: list[bytes]) -> None:
    data = bytes_codec.serialize(object_array(items))
    assert bytes_codec.deserialize(data) == items
    assert bytes_codec.deserialize(memoryview(data)) == items
    if items:
        assert client_utils.deserialize_bytes_tensor(data).tolist() == items


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(MANY - 10, MANY + 10), st.data())
def test_elements_of_one_length_split_alike(width: int, count: int, data: st.DataObject) -> None:
    items = [data.draw(st.binary(min_size=width, max_size=width)) for _ in range(count)]
    items[-1] = items[-1] + b"\x00\x00"  # trailing NULs are data, not padding
    encoded = bytes_codec.serialize(items)
    assert bytes_codec.deserialize(encoded) == items  # lengths differ at the end: the loop
    same = items[:-1]
    assert bytes_codec.deserialize(bytes_codec.serialize(same)) == same
    assert bytes_codec._uniform(bytes_codec.serialize(same)) == same  # numpy's split, not the loop
    assert bytes_codec._uniform(encoded) is None


def test_one_differing_length_in_a_uniform_looking_buffer_is_read_as_it_is() -> None:
    """Every length 3 but one that swallows its neighbour: the total still divides evenly."""
    items = [b"abc"] * MANY
    encoded = bytearray(bytes_codec.serialize(items))
    encoded[7 * 10 : 7 * 10 + 4] = (10).to_bytes(4, "little")  # element 10 now holds 10 bytes
    decoded = bytes_codec.deserialize(bytes(encoded))
    assert len(decoded) == MANY - 1 and decoded[10] == b"abc" + (3).to_bytes(4, "little") + b"abc"


@pytest.mark.parametrize(
    "data,message",
    [
        (
            b"\x05\x00\x00\x00ab",
            "incomplete string data for inference input 'S', expecting string of length 5 but only 2 bytes available",
        ),
        (
            b"\x01\x00\x00\x00a\x01\x00",
            "incomplete string length for inference input 'S', expecting 4 bytes but only 2 bytes available",
        ),
    ],
)
def test_a_malformed_buffer_names_the_tensor_in_tritons_words(data: bytes, message: str) -> None:
    with pytest.raises(bytes_codec.BytesFormatError) as caught:
        bytes_codec.deserialize(data, "inference input 'S'")
    assert str(caught.value) == message
    # the server answers it as INVALID_ARG; a model catches it as the ValueError it is
    assert isinstance(caught.value, TritonError) and caught.value.code == ErrorCode.INVALID_ARG
    assert isinstance(caught.value, ValueError)


def test_a_cut_short_length_can_be_worded_by_the_caller() -> None:
    with pytest.raises(bytes_codec.BytesFormatError, match=r"^only 3 left$"):
        bytes_codec.deserialize(b"abc", "x", short_length=lambda available: f"only {available} left")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=12), min_size=1, max_size=MANY + 20), st.data())
def test_any_cut_is_refused_cleanly(items: list[bytes], data: st.DataObject) -> None:
    encoded = bytes_codec.serialize(items)
    cut = data.draw(st.integers(1, len(encoded) - 1))
    try:
        decoded = bytes_codec.deserialize(encoded[:cut])
    except bytes_codec.BytesFormatError as exc:
        assert "incomplete string" in str(exc) and "BYTES tensor" in str(exc)
    else:  # a cut between elements leaves the ones before it
        assert decoded == items[: len(decoded)]


@pytest.mark.parametrize("count", [1, MANY])
def test_an_element_longer_than_a_length_can_say_is_refused(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bytes_codec, "_MAX_LENGTH", 3)  # 4 GiB of test data is out of the question
    with pytest.raises(bytes_codec.BytesFormatError, match="element of 4 bytes is longer"):
        bytes_codec.serialize([b"abcd"] * count)


def test_object_array_keeps_elements_whole() -> None:
    array = bytes_codec.object_array([b"ab", b"cd", b"ef", b"gh"], (2, 2))
    assert array.dtype == object and array.shape == (2, 2) and array[1, 1] == b"gh"
