"""The program binary: header fields, round trips, and one specific exception per kind of bad file."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from systolica.config import preset
from systolica.isa import encode, make
from systolica.program import (
    HEADER_BYTES,
    BadFlags,
    BadMagic,
    BadVersion,
    ConfigMismatch,
    IllegalWord,
    Program,
    ProgramError,
    TruncatedProgram,
    words_from_bytes,
    words_to_bytes,
)

TINY, DEFAULT = preset("tiny"), preset("default")


def _prog(cfg=TINY):
    return Program.from_instrs([make("LOAD", rows=1, lines=1, push_next=True), make("GEMM", m=1, k=1, n=1,
                                pop_prev=True), make("FINISH")], cfg)


def test_round_trip_bytes_and_file(tmp_path):
    p = _prog()
    data = p.to_bytes()
    assert data[:4] == b"SYST"
    magic, version, flags, chash, n = struct.unpack_from("<4sHHII", data)
    assert (version, flags, chash, n) == (1, 0, TINY.hash32(), 3)
    assert len(data) == HEADER_BYTES + 3 * 16
    assert Program.from_bytes(data) == p
    f = tmp_path / "p.bin"
    p.save(f)
    q = Program.load(f, config=TINY)
    assert q == p and q.instrs() == p.instrs()
    assert int.from_bytes(data[16:32], "little") == p.words[0]


def test_numpy_forms():
    p = _prog()
    a = p.to_numpy()
    assert a.shape == (3, 16) and a.dtype == np.uint8
    assert Program(a, TINY) == p
    halves = np.array([[w & (2**64 - 1), w >> 64] for w in p.words], dtype=np.uint64)
    assert Program(halves, TINY) == p
    with pytest.raises(ProgramError, match="numpy words"):
        Program(np.zeros((3, 4), np.int32), TINY)


def test_bad_magic():
    data = bytearray(_prog().to_bytes())
    data[:4] = b"ELF\x7f"
    with pytest.raises(BadMagic, match="not a systolica program"):
        Program.from_bytes(bytes(data))
    with pytest.raises(BadMagic):
        Program.from_bytes(b"garbage!")


def test_bad_version():
    data = bytearray(_prog().to_bytes())
    data[4:6] = (7).to_bytes(2, "little")
    with pytest.raises(BadVersion, match="version 7"):
        Program.from_bytes(bytes(data))


def test_bad_flags():
    data = bytearray(_prog().to_bytes())
    data[6] = 1
    with pytest.raises(BadFlags):
        Program.from_bytes(bytes(data))


@pytest.mark.parametrize("cut", [1, 15, 16, 17])
def test_truncated(cut):
    data = _prog().to_bytes()
    with pytest.raises(TruncatedProgram, match="header says 3 instructions"):
        Program.from_bytes(data[:-cut])


def test_trailing_bytes_and_short_header():
    data = _prog().to_bytes()
    with pytest.raises(TruncatedProgram, match="trailing"):
        Program.from_bytes(data + b"\0")
    with pytest.raises(TruncatedProgram, match="header"):
        Program.from_bytes(data[:10])


def test_config_mismatch_names_both_hashes_and_fix():
    p = _prog(TINY)
    with pytest.raises(ConfigMismatch) as ei:
        Program.from_bytes(p.to_bytes(), config=DEFAULT)
    msg = str(ei.value)
    assert f"{TINY.hash32():08x}" in msg and f"{DEFAULT.hash32():08x}" in msg and "--config" in msg
    assert ei.value.program_hash == TINY.hash32() and ei.value.config_hash == DEFAULT.hash32()
    p.check_config(TINY)


def test_illegal_word_names_index():
    words = [encode(make("FINISH")), encode(make("NOP")), 0x1E, encode(make("FINISH"))]
    data = Program(words, TINY).to_bytes()
    with pytest.raises(IllegalWord, match="instruction 2: illegal opcode") as ei:
        Program.from_bytes(data)
    assert ei.value.index == 2
    assert Program.from_bytes(data, validate=False).words == words  # for fault tests of simulators
    reserved = encode(make("FINISH")) | (1 << 100)
    with pytest.raises(IllegalWord, match="instruction 0: .*bits set above"):
        Program([reserved], TINY).validate()


def test_exceptions_share_a_base():
    for cls in (BadMagic, BadVersion, BadFlags, TruncatedProgram, ConfigMismatch, IllegalWord):
        assert issubclass(cls, ProgramError)


def test_missing_file(tmp_path):
    with pytest.raises(ProgramError, match="does not exist"):
        Program.load(tmp_path / "nope.bin")


def test_word_range():
    with pytest.raises(ProgramError, match="128-bit"):
        Program([1 << 128], TINY)


def test_words_bytes_round_trip():
    words = [0, 1, (1 << 128) - 1, 0x0123456789ABCDEF_FEDCBA9876543210]
    raw = words_to_bytes(words)
    assert raw[:16] == bytes(16) and raw[16] == 1 and raw[32:48] == b"\xff" * 16
    assert words_from_bytes(raw) == words
    assert words_from_bytes(np.frombuffer(raw, np.uint8)) == words
    with pytest.raises(ProgramError, match="20 bytes is not a whole number of 16-byte"):
        words_from_bytes(bytes(20))
