"""The program binary: a header stamped with the config hash, then 16-byte instruction words.

Layout (all little-endian, like the AXI bus that fetches it)::

    offset  size  field
    0       4     magic  b"SYST"
    4       2     version (u16) = 1
    6       2     flags (u16), reserved: 0
    8       4     config hash (u32) = AccelConfig.hash32() of the accelerator it was compiled for
    12      4     instruction count n (u32)
    16      16*n  instruction words (128 bits each, bit 0 of the word is bit 0 of its first byte)

The header is exactly one instruction word long, so the instructions that follow
it stay 16-byte aligned when the runtime copies the file into DRAM.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from systolica.config import AccelConfig
from systolica.isa import WORD_BITS, WORD_BYTES, IllegalInstruction, Instr, decode, encode

__all__ = [
    "MAGIC", "VERSION", "HEADER_BYTES", "Program", "ProgramError", "BadMagic", "BadVersion", "BadFlags",
    "ConfigMismatch", "TruncatedProgram", "IllegalWord", "words_to_bytes", "words_from_bytes",
]

MAGIC = b"SYST"
VERSION = 1
_HEADER = struct.Struct("<4sHHII")
HEADER_BYTES = _HEADER.size
assert HEADER_BYTES == WORD_BYTES  # keeps the words aligned behind the header


class ProgramError(ValueError):
    """A program binary that cannot be used; the subclasses say why."""


class BadMagic(ProgramError):
    """The file does not start with ``b"SYST"``: not a systolica program."""


class BadVersion(ProgramError):
    """A program format version this build does not read."""


class BadFlags(ProgramError):
    """Header flag bits this build does not know (no flags are defined in version 1)."""


class TruncatedProgram(ProgramError):
    """The file size is not header + count * 16 bytes."""


class ConfigMismatch(ProgramError):
    """The program was compiled for an accelerator of another configuration."""

    def __init__(self, program_hash: int, config: AccelConfig | int):
        have = config.hash32() if isinstance(config, AccelConfig) else int(config)
        self.program_hash, self.config_hash = program_hash, have
        if isinstance(config, AccelConfig):
            todo = (f"recompile with --config {config.name} (the accelerator's config), "
                    "or run it on the accelerator it was compiled for")
            who = f"this accelerator ({config.name!r}) reports {have:08x}"
        else:
            todo = "recompile for this accelerator's config"
            who = f"this accelerator reports {have:08x}"
        super().__init__(f"program was compiled for config {program_hash:08x}, {who}: {todo}")


class IllegalWord(ProgramError):
    """An instruction word that does not decode, with its index in the program."""

    def __init__(self, index: int, word: int, reason: str):
        self.index, self.word, self.reason = index, word, reason
        super().__init__(f"instruction {index}: {reason}")


def words_to_bytes(words: Iterable[int]) -> bytes:
    """128-bit instruction words as the bytes the accelerator fetches (little-endian, 16 per word)."""
    return b"".join(int(w).to_bytes(WORD_BYTES, "little") for w in words)


def words_from_bytes(raw: bytes | np.ndarray) -> list[int]:
    """The inverse of :func:`words_to_bytes`: 128-bit little-endian words from raw bytes.

    Raises
    ------
    ProgramError
        The length is not a multiple of the 16-byte word.
    """
    data = np.ascontiguousarray(raw).tobytes() if isinstance(raw, np.ndarray) else bytes(raw)
    if len(data) % WORD_BYTES:
        raise ProgramError(f"{len(data)} bytes is not a whole number of {WORD_BYTES}-byte instruction words")
    q = np.frombuffer(data, dtype="<u8").reshape(-1, 2)
    return [int(lo) | (int(hi) << 64) for lo, hi in q]


class Program:
    """An instruction stream plus the hash of the configuration it was compiled for.

    Parameters
    ----------
    words
        The 128-bit instruction words, as Python ints, or a numpy array of shape
        ``(n, 16)`` uint8 (the bytes of each word) or ``(n, 2)`` uint64 (low, high half).
    config
        The :class:`~systolica.config.AccelConfig` (or its ``hash32()``) the program targets.
    flags
        Header flags; must be 0 in format version 1.
    """

    def __init__(self, words: Sequence[int] | np.ndarray, config: AccelConfig | int, flags: int = 0):
        self.config_hash = config.hash32() if isinstance(config, AccelConfig) else int(config)
        if not 0 <= self.config_hash < 1 << 32:
            raise ProgramError(f"config hash {self.config_hash:#x} does not fit 32 bits")
        if flags:
            raise BadFlags(f"flags={flags:#06x}: format version {VERSION} defines no flags; use 0")
        self.flags = flags
        if isinstance(words, np.ndarray):
            words = _words_from_numpy(words)
        self.words: list[int] = [int(w) for w in words]
        for i, w in enumerate(self.words):
            if not 0 <= w < 1 << WORD_BITS:
                raise ProgramError(f"instruction {i}: word {w:#x} is not a {WORD_BITS}-bit value")
        self._decoded: list[Instr] | None = None

    # ------------------------------------------------------------ building
    @classmethod
    def from_instrs(cls, instrs: Iterable[Instr], config: AccelConfig | int) -> Program:
        """Encode instructions (raises :class:`systolica.isa.IsaError` for a field out of range)."""
        return cls([encode(i) for i in instrs], config)

    def instrs(self) -> list[Instr]:
        """The decoded instructions; raises :class:`IllegalWord` naming the first bad index."""
        if self._decoded is None:
            out = []
            for i, w in enumerate(self.words):
                try:
                    out.append(decode(w))
                except IllegalInstruction as e:
                    raise IllegalWord(i, w, str(e)) from None
            self._decoded = out
        return list(self._decoded)

    def validate(self) -> None:
        """Raise :class:`IllegalWord` if any word is not a legal instruction."""
        self.instrs()

    def check_config(self, config: AccelConfig | int) -> None:
        """Raise :class:`ConfigMismatch` unless the program was compiled for ``config``."""
        have = config.hash32() if isinstance(config, AccelConfig) else int(config)
        if have != self.config_hash:
            raise ConfigMismatch(self.config_hash, config)

    # ---------------------------------------------------------- containers
    def __len__(self) -> int:
        return len(self.words)

    def __iter__(self):
        return iter(self.words)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return (self.words, self.config_hash, self.flags) == (other.words, other.config_hash, other.flags)

    def __repr__(self) -> str:
        return f"Program({len(self.words)} instructions, config {self.config_hash:08x})"

    def to_numpy(self) -> np.ndarray:
        """The words as a ``(n, 16)`` uint8 array (byte ``j`` of word ``i`` at ``[i, j]``)."""
        body = words_to_bytes(self.words)
        return np.frombuffer(body, dtype=np.uint8).reshape(len(self.words), WORD_BYTES).copy()

    # --------------------------------------------------------------- bytes
    def to_bytes(self) -> bytes:
        head = _HEADER.pack(MAGIC, VERSION, self.flags, self.config_hash, len(self.words))
        return head + words_to_bytes(self.words)

    @classmethod
    def from_bytes(cls, data: bytes, *, config: AccelConfig | int | None = None, validate: bool = True,
                   source: str = "program") -> Program:
        """Parse a program binary.

        Parameters
        ----------
        data
            The file contents.
        config
            When given, the program must have been compiled for it (else :class:`ConfigMismatch`).
        validate
            Decode every word and raise :class:`IllegalWord` for the first illegal one.
            Tests of the fault paths pass ``False`` to feed illegal words to a simulator.
        source
            Name used in error messages (the file path).
        """
        data = bytes(data)
        if len(data) < HEADER_BYTES:
            if not MAGIC.startswith(data[:4]):
                raise BadMagic(f"{source}: starts with {data[:4]!r}, not {MAGIC!r}: not a systolica program")
            raise TruncatedProgram(f"{source}: {len(data)} bytes is shorter than the {HEADER_BYTES}-byte header")
        magic, version, flags, chash, count = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise BadMagic(f"{source}: starts with {magic!r}, not {MAGIC!r}: not a systolica program")
        if version != VERSION:
            raise BadVersion(f"{source}: format version {version}; this systolica reads version {VERSION} "
                             "(recompile the program with this systolica)")
        if flags:
            raise BadFlags(f"{source}: header flags {flags:#06x} set; format version {VERSION} defines none")
        want = HEADER_BYTES + count * WORD_BYTES
        if len(data) != want:
            raise TruncatedProgram(
                f"{source}: header says {count} instructions ({want} bytes with the header) but the file has "
                f"{len(data)} bytes" + (" (truncated)" if len(data) < want else " (trailing bytes)"))
        words = words_from_bytes(data[HEADER_BYTES:want])
        prog = cls(words, chash, flags)
        if config is not None:
            prog.check_config(config)
        if validate:
            prog.validate()
        return prog

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | Path, *, config: AccelConfig | int | None = None, validate: bool = True) -> Program:
        p = Path(path)
        if not p.is_file():
            raise ProgramError(f"program file {p} does not exist")
        return cls.from_bytes(p.read_bytes(), config=config, validate=validate, source=str(p))


def _words_from_numpy(a: np.ndarray) -> list[int]:
    if a.ndim == 2 and a.shape[1] == WORD_BYTES and a.dtype == np.uint8:
        return words_from_bytes(a)
    if a.ndim == 2 and a.shape[1] == 2 and a.dtype == np.uint64:
        return words_from_bytes(np.ascontiguousarray(a, dtype="<u8"))  # (low, high) halves, little-endian
    raise ProgramError(f"numpy words must be (n, {WORD_BYTES}) uint8 or (n, 2) uint64, got {a.shape} {a.dtype}")
