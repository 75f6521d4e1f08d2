"""Seeded mutation fuzzing of what users hand to systolica: GGUF files, compiled artifacts, arguments, configs.

Every case runs in this process under a SIGALRM watchdog and ends in one :class:`Outcome`:

- ``ok``: exit 0 and a correct result (the target checks it);
- ``fault``: exit 1 with the accelerator's fault on one line;
- ``error``: exit 2 with a one-line message (argparse's usage lines may precede it);
- ``traceback``: any exception that escaped, or exit 2 with a Python traceback in the output;
- ``hang``: the watchdog fired;
- ``silent``: exit 0 on an input with a structural defect, or exit 0 with a wrong result.

The last three are the defects the suite exists to find.  A mutation says whether its defect is
structural (``must_fail``: exit 0 would be a silent success) or possibly harmless (a flipped byte in a
token string may give another valid token).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import signal
import struct
import traceback
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf

BAD = ("traceback", "hang", "silent")


class Hang(BaseException):
    """Raised by the watchdog inside a case that ran past its time (a BaseException: no `except Exception` eats it)."""


@contextlib.contextmanager
def watchdog(seconds: float):
    def fire(signum, frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Result:
    kind: str  # input kind: gguf, artifact, args, config
    case: str  # what was mutated
    outcome: str
    detail: str = ""


@dataclass
class Tally:
    results: list[Result] = field(default_factory=list)

    def add(self, r: Result) -> None:
        self.results.append(r)

    def counts(self) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for r in self.results:
            out.setdefault(r.kind, Counter())[r.outcome] += 1
        return out

    def bad(self) -> list[Result]:
        return [r for r in self.results if r.outcome in BAD]

    def report(self) -> str:
        lines = [f"{'kind':10} {'cases':>6} " + " ".join(f"{o:>9}" for o in ("ok", "fault", "error", *BAD))]
        for kind, c in sorted(self.counts().items()):
            lines.append(f"{kind:10} {sum(c.values()):6d} " + " ".join(f"{c[o]:9d}" for o in
                                                                       ("ok", "fault", "error", *BAD)))
        return "\n".join(lines)


def run_cli(argv: list[str], timeout_s: float) -> tuple[int | None, str, str, str | None]:
    """``systolica ARGV`` in this process: (exit code, stdout, stderr, escaped exception or "hang")."""
    from systolica.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = None
    rc: int | None = None
    try:
        with watchdog(timeout_s), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    except Hang:
        escaped = "hang"
    except Exception:  # noqa: BLE001 - an escaped exception is the finding
        escaped = traceback.format_exc()
    return rc, out.getvalue(), err.getvalue(), escaped


def classify_cli(rc, out: str, err: str, escaped: str | None, must_fail: bool,
                 correct: Callable[[str], bool] | None = None) -> tuple[str, str]:
    """The :class:`Outcome` of one CLI run (see the module docstring)."""
    if escaped == "hang":
        return "hang", ""
    if escaped is not None:
        return "traceback", escaped.strip().splitlines()[-1]
    text = out + err
    if "Traceback (most recent call last)" in text:
        return "traceback", text[-300:]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc == 2:
        last = lines[-1] if lines else ""
        if not (last.startswith("error: ") or ": error: " in last):
            return "traceback", f"exit 2 without a one-line error: {err[-300:]!r}"
        return "error", last
    if rc == 1:
        if not lines or "fault" not in lines[-1]:
            return "traceback", f"exit 1 without a fault line: {err[-300:]!r}"
        return "fault", lines[-1]
    if rc == 0:
        if must_fail:
            return "silent", out[-200:]
        if correct is not None and not correct(out):
            return "silent", f"wrong result: {out[-200:]!r}"
        return "ok", ""
    return "traceback", f"exit code {rc!r}"


# ------------------------------------------------------------------ GGUF mutations
@dataclass
class Mutant:
    name: str
    data: bytes | None  # None: write through write_gguf with ``fields``
    must_fail: bool
    fields: dict | None = None


def _tensor_positions(path: Path) -> list[dict]:
    """Byte positions of n_dims, dims, type and offset of each tensor info (from the gguf package's reader)."""
    r = gguf.GGUFReader(path)
    out = []
    for t in r.tensors:
        pos = int(t.field.offset)
        parts = {}
        for name, part in zip(("name_len", "name", "n_dims", "dims", "type", "offset"), t.field.parts, strict=True):
            parts[name] = (pos, int(part.nbytes))
            pos += int(part.nbytes)
        out.append({"tensor": t.name, "shape": [int(d) for d in t.shape], **parts})
    return out


def _meta_positions(path: Path) -> dict[str, int]:
    """Byte position of the value-type code of each metadata key."""
    r = gguf.GGUFReader(path)
    return {k: int(f.offset) + 8 + len(k.encode()) for k, f in r.fields.items() if not k.startswith("GGUF.")}


def gguf_mutants(base: Path, rng: random.Random, n: int) -> list[Mutant]:
    """``n`` mutants of the GGUF file ``base``, drawn from every class of the issue."""
    data = base.read_bytes()
    tens = _tensor_positions(base)
    metas = _meta_positions(base)
    header_end = max(t["offset"][0] + 8 for t in tens)
    hp = ["llama.context_length", "llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
          "llama.attention.head_count", "llama.attention.head_count_kv"]
    fp = ["llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base"]
    out: list[Mutant] = []

    def put(buf: bytearray, pos: int, fmt: str, v) -> bytes:
        struct.pack_into("<" + fmt, buf, pos, v)
        return bytes(buf)

    makers: list[Callable[[], Mutant]] = []

    def flip_header() -> Mutant:
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(header_end)] ^= 1 << rng.randrange(8)
        return Mutant("flip header byte", bytes(b), must_fail=False)

    def flip_any() -> Mutant:
        b = bytearray(data)
        b[rng.randrange(len(b))] = rng.randrange(256)
        return Mutant("flip any byte", bytes(b), must_fail=False)

    def truncate() -> Mutant:
        return Mutant("truncate", data[:rng.randrange(len(data))], must_fail=True)

    def tensor_info() -> Mutant:
        t = rng.choice(tens)
        b = bytearray(data)
        what = rng.choice(["n_dims0", "n_dims5", "n_dims_huge", "dim0", "dim_huge", "dim_double", "type_bad",
                           "type_other", "offset_overlap", "offset_past_end", "offset_unaligned"])
        if what.startswith("n_dims"):
            v = {"n_dims0": 0, "n_dims5": 5, "n_dims_huge": 0xFFFF_FFFF}[what]
            return Mutant(f"tensor {what}", put(b, t["n_dims"][0], "I", v), True)
        if what.startswith("dim"):
            k = rng.randrange(len(t["shape"]))
            v = {"dim0": 0, "dim_huge": rng.choice([1 << 40, (1 << 64) - 1, 1 << 32]),
                 "dim_double": t["shape"][k] * 2}[what]
            return Mutant(f"tensor {what}", put(b, t["dims"][0] + 8 * k, "Q", v), True)
        if what == "type_bad":
            return Mutant("tensor type unknown", put(b, t["type"][0], "I", rng.choice([4, 5, 99, 0xFFFF_FFFF])), True)
        if what == "type_other":  # a real type of another size, or an integer type systolica does not read
            # the last tensor may shrink: ggml reads the data it needs and ignores trailing bytes
            return Mutant("tensor type other", put(b, t["type"][0], "I", rng.choice([1, 8, 24, 26])), t is not tens[-1])
        other = rng.choice([x for x in tens if x is not t])
        cur = struct.unpack_from("<Q", data, other["offset"][0])[0]
        if what == "offset_overlap":
            return Mutant("tensor offset overlap", put(b, t["offset"][0], "Q", cur), True)
        if what == "offset_past_end":
            return Mutant("tensor offset past end", put(b, t["offset"][0], "Q", len(data) + rng.choice([0, 32, 1 << 40])),
                          True)
        return Mutant("tensor offset unaligned", put(b, t["offset"][0], "Q", cur + rng.choice([1, 3, 17])), True)

    def meta_type() -> Mutant:
        key = rng.choice(hp + fp)
        b = bytearray(data)
        v = rng.choice([int(gguf.GGUFValueType.FLOAT32) if key in hp else int(gguf.GGUFValueType.UINT32),
                        int(gguf.GGUFValueType.STRING), int(gguf.GGUFValueType.ARRAY), 13, 0xFFFF_FFFF])
        return Mutant(f"metadata type of {key}", put(b, metas[key], "I", v), True)

    def meta_value() -> Mutant:
        key = rng.choice(hp + fp + ["llama.vocab_size"])
        if key in fp:
            v = rng.choice([float("nan"), float("inf"), -1.0, 0.0, "1e-5"])
        else:
            v = rng.choice(["32", 0, 1 << 31, 0xFFFF_FFFF, 3.5, [1, 2]])
        if key == "llama.context_length" and v in (1 << 31, 0xFFFF_FFFF):
            v = 0
        return Mutant(f"metadata value {key}={v!r}", None, True, {key: v})

    def meta_missing() -> Mutant:
        key = rng.choice(["llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
                          "llama.attention.head_count", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"])
        return Mutant(f"metadata missing {key}", None, True, {key: None})

    def special_token() -> Mutant:
        key = rng.choice(["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"])
        return Mutant(f"{key} out of vocabulary", None, True, {key: rng.choice([10_000, 1 << 30, 0xFFFF_FFFF])})

    def tokenizer_edit() -> Mutant:
        what = rng.choice(["merge_unknown", "merge_no_space", "merge_empty", "token_empty", "tokens_short",
                           "types_short", "pre_unknown", "model_unknown"])
        f = {"merge_unknown": {"_merge": "zzqq\u00ff xx\u0100"}, "merge_no_space": {"_merge": "abc"},
             "merge_empty": {"_merge": ""}, "token_empty": {"_token": ""},
             "tokens_short": {"_tokens_short": True}, "types_short": {"_types_short": True},
             "pre_unknown": {"tokenizer.ggml.pre": "nonesuch"}, "model_unknown": {"tokenizer.ggml.model": "wordpiece"}}
        return Mutant(f"tokenizer {what}", None, what != "token_empty", f[what])

    def block_count() -> Mutant:
        return Mutant("absurd block_count", None, True,
                      {"llama.block_count": rng.choice([2, 1000, 1 << 20, 0xFFFF_FFFF])})

    makers = [flip_header, flip_header, flip_any, truncate, tensor_info, tensor_info, tensor_info, meta_type,
              meta_value, meta_value, meta_missing, special_token, tokenizer_edit, tokenizer_edit, block_count]
    for _ in range(n):
        out.append(rng.choice(makers)())
    return out


# ------------------------------------------------------------------ artifact mutations
_VALUES = [0, -1, 1, 3, 1 << 40, -(1 << 40), 2.5, float("nan"), "x", None, [], {}, True, [0, "dram", "embed", [0]]]


def _paths(d, prefix=()):
    yield prefix
    if isinstance(d, dict):
        for k, v in d.items():
            if k in ("tokenizer", "stats", "quant_errors"):  # big and read by nobody that matters here
                yield (*prefix, k)
                continue
            yield from _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d[:6]):
            yield from _paths(v, (*prefix, i))


def rezip(members: dict[str, bytes], manifest=None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name, blob in members.items():
            if name == "manifest.json" and manifest is not None:
                blob = json.dumps(manifest).encode()
            z.writestr(name, blob, compress_type=zipfile.ZIP_STORED if name == "image.bin" else zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def artifact_mutants(data: bytes, rng: random.Random, n: int) -> list[tuple[str, bytes, bool, bool]]:
    """``(name, bytes, must_fail, content)`` mutants of a compiled artifact.

    ``content`` marks edits of program words or weights re-zipped with good CRCs: a different but
    well-formed artifact, not a structural defect, so any exit 0/1/2 is acceptable (no traceback, no hang).
    """
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = {n_: z.read(n_) for n_ in z.namelist()}
    man = json.loads(members["manifest.json"])
    paths = [p for p in _paths(man) if p]
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.25:
            b = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            out.append(("flip byte", bytes(b), False, False))
        elif r < 0.3:
            out.append(("truncate", data[:rng.randrange(len(data))], True, False))
        elif r < 0.85:
            m = json.loads(members["manifest.json"])
            p = rng.choice(paths)
            parent = m
            for k in p[:-1]:
                parent = parent[k]
            if rng.random() < 0.2 and isinstance(parent, dict):
                del parent[p[-1]]
                out.append((f"manifest del {'.'.join(map(str, p))}", rezip(members, m), False, False))
            else:
                old = parent[p[-1]]
                v = rng.choice(_VALUES + ([old + rng.choice([-1, 1, 16, -16])] if isinstance(old, int)
                                          and not isinstance(old, bool) else []))
                parent[p[-1]] = v
                out.append((f"manifest {'.'.join(map(str, p))}={v!r:.30}", rezip(members, m), False, False))
        elif r < 0.9:
            special = rng.choice([[], "manifest", 7, {"format": "systolica-artifact", "version": 1}])
            out.append((f"manifest is {special!r:.20}", rezip({**members, "manifest.json": json.dumps(special).encode()}),
                        True, False))
        else:
            name = rng.choice([k for k in members if k != "manifest.json"])
            b = bytearray(members[name])
            if rng.random() < 0.3:
                b = b[:rng.randrange(len(b))] if b else b
                out.append((f"{name} cut", rezip({**members, name: bytes(b)}), True, False))
            else:
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
                out.append((f"{name} content byte {i}", rezip({**members, name: bytes(b)}), False, True))
    return out


# ------------------------------------------------------------------ argument mutations
#: option -> (valid values, invalid values)
RUN_OPTIONS: dict[str, tuple[list[str], list[str]]] = {
    "--temperature": (["0", "0.7", "1e-9", "2"], ["nan", "inf", "-inf", "-1", "abc", "1e400", ""]),
    "--top-k": (["0", "5"], ["-1", "x", "1.5", "nan"]),
    "--top-p": (["1", "0.9", "0.05"], ["0", "-0.1", "1.5", "nan", "inf"]),
    "--seed": (["0", "7", str(1 << 63)], ["-1", "x", str(1 << 64), "1e3"]),
    "--timeout": (["60", "1e6"], ["0", "-1", "nan", "inf", "-inf", "x"]),
    "--page": (["16", "8", "4"], ["0", "3", "-16", "x", "12"]),
    "--max-seq": (["64", "32"], ["0", "-1", "x"]),
    "--prefill-chunk": (["16", "4", "1"], ["0", "-3", "x"]),
    "-n": (["1", "3"], ["0", "-1", "x"]),
    "--board": ([], ["", " ", "nosuchboard"]),
    "--backend": (["golden"], ["cuda", ""]),
}
PROMPTS = (["hello world", "the quick brown fox", "ü€ and more"], ["\udcff\udcfe", "a\udc80b", ""])
