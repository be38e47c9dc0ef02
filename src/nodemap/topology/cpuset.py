"""An immutable set of small non-negative integers (CPU or NUMA OS indexes).

Backed by a Python int used as a bitmask: union, intersection and difference
are single big-int operations, which keeps planning a 16k-PU node cheap.
Reads and writes the Linux/hwloc list syntax ("0-3,8-11") and the hex masks
of sysfs ("ff,00000000") and hwloc XML ("0x000000ff,0xffffffff").
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~5 ms to import, more than `nodemap topo` reads
if TYPE_CHECKING:
    from typing import Iterable, Iterator

from ..text import is_decimal, shown

__all__ = ["CpuSet", "CpuSetError", "MAX_INDEX"]


class CpuSetError(ValueError):
    """A CPU/NUMA list or mask that cannot be parsed."""


# OS indexes above this are refused: no machine numbers CPUs or NUMA nodes so
# high (Linux's NR_CPUS tops out at 8192), and a set is a bitmask, so one
# index of 4e9 written in ten characters would cost 500 MB.
MAX_INDEX = (1 << 20) - 1
LIMIT_TEXT = f"nodemap's limit is {MAX_INDEX} (2^20 - 1)"
# Members written by one list, counting repeats: sysfs lists never overlap,
# so this only stops "0-1048575,0-1048575,..." from costing text x 2^20.
_MAX_WRITTEN = 4 << 20
_TO_BITS = bytes.maketrans(b"\x00\x01", b"01")


class CpuSet:
    __slots__ = ("_mask",)

    def __init__(self, items: Iterable[int] = ()) -> None:
        items = items if isinstance(items, (list, tuple, range)) else list(items)
        for i in items:
            if i < 0:
                raise CpuSetError(f"negative index {i} in a CPU set")
            if i > MAX_INDEX:
                raise CpuSetError(f"index {i} in a CPU set is too large: {LIMIT_TEXT}")
        if len(items) <= 64:
            mask = 0
            for i in items:
                mask |= 1 << i
            self._mask = mask
            return
        flags = bytearray(max(items) + 1)  # many members: one pass, not one big-int OR each
        for i in items:
            flags[i] = 1
        self._mask = _flags_to_mask(flags)

    # --- construction -------------------------------------------------
    @classmethod
    def from_mask(cls, mask: int) -> "CpuSet":
        if mask < 0:
            raise CpuSetError("negative mask")
        if mask.bit_length() > MAX_INDEX + 1:
            raise CpuSetError(f"a CPU set reaching index {mask.bit_length() - 1} is too large: {LIMIT_TEXT}")
        s = cls.__new__(cls)
        s._mask = mask
        return s

    @classmethod
    def parse(cls, text: str) -> "CpuSet":
        """Parse list syntax: "0-3,8-11", "0-15:2" (stride), "" (empty).

        Time is linear in the text plus the members written (each part
        marks a byte array, built into the mask once), and indexes above
        MAX_INDEX are refused before anything is allocated.
        """
        text = text.strip()
        if not text:
            return cls.from_mask(0)
        parts = [_part(p, text) for p in text.split(",")]
        if len(parts) == 1 and parts[0][2] == 1:  # the common "0-63": one big-int expression
            lo, hi, _ = parts[0]
            return cls.from_mask(((1 << (hi - lo + 1)) - 1) << lo)
        if sum((hi - lo) // stride + 1 for lo, hi, stride in parts) > _MAX_WRITTEN:
            raise CpuSetError(f"CPU list {shown(text, 60)} repeats itself: over {_MAX_WRITTEN} members written "
                              "(write each range once)")
        top = max(hi for _, hi, _ in parts)
        ors = sum(1 if stride == 1 else (hi - lo) // stride + 1 for lo, hi, stride in parts)
        # small masks, or few ORs into a large one (a PU's own "98765": a byte array of the whole
        # range per PU made 100,000 PUs quadratic): big-int ORs are cheap and a byte array costs more
        if top < 4096 or ors <= 64:
            mask = 0
            for lo, hi, stride in parts:
                if stride == 1:
                    mask |= ((1 << (hi - lo + 1)) - 1) << lo
                else:
                    for i in range(lo, hi + 1, stride):
                        mask |= 1 << i
            return cls.from_mask(mask)
        flags = bytearray(top + 1)
        for lo, hi, stride in parts:
            count = (hi - lo) // stride + 1
            flags[lo:hi + 1:stride] = b"\x01" * count
        return cls.from_mask(_flags_to_mask(flags))

    @classmethod
    def parse_mask(cls, text: str) -> "CpuSet":
        """Parse a hex mask: sysfs "00000000,0000ffff" or hwloc "0x0000ffff,0x0".

        hwloc writes "0xf...f,,0x..." style infinite sets as "0xf...f"; a
        leading run of 'f' words in hwloc means "and all beyond", which we
        cannot hold, so such sets are truncated to the words written.
        Linear in the text: the words are padded to 8 digits and read as one
        number (shifting a growing mask per word was quadratic).
        """
        text = text.strip()
        if not text:
            return cls.from_mask(0)
        words = []
        split = text.split(",")
        for word in split:
            word = word.strip()
            if word[:2] in ("0x", "0X"):
                word = word[2:]
            word = word.lstrip("0")
            if len(word) > 8 and len(split) > 1 or not _HEX.issuperset(word):
                raise CpuSetError(f"bad hex mask {shown(text, 60)}: {shown(word, 60)} is not a 32-bit hex word")
            words.append(word.rjust(8, "0"))
        mask = int("".join(words), 16)
        if mask.bit_length() > MAX_INDEX + 1:
            raise CpuSetError(f"hex mask {shown(text, 60)} reaches index {mask.bit_length() - 1}: {LIMIT_TEXT}")
        return cls.from_mask(mask)

    # --- views ----------------------------------------------------------
    @property
    def mask(self) -> int:
        return self._mask

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges():
            yield from range(a, b + 1)

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and i >= 0 and bool(self._mask >> i & 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CpuSet) and other._mask == self._mask

    def __hash__(self) -> int:
        return hash(self._mask)

    def __lt__(self, other: "CpuSet") -> bool:  # for deterministic sorting
        return (self.first(), self._mask) < (other.first(), other._mask)

    def first(self) -> int:
        """Lowest member, -1 when empty."""
        m = self._mask
        return (m & -m).bit_length() - 1 if m else -1

    def last(self) -> int:
        return self._mask.bit_length() - 1

    def to_list(self) -> list[int]:
        return list(self)

    # --- algebra ----------------------------------------------------------
    def __or__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask | other._mask)

    def __and__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask & ~other._mask)

    def __xor__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask ^ other._mask)

    def issubset(self, other: "CpuSet") -> bool:
        return self._mask & ~other._mask == 0

    def isdisjoint(self, other: "CpuSet") -> bool:
        return self._mask & other._mask == 0

    @staticmethod
    def union_all(sets: Iterable["CpuSet"]) -> "CpuSet":
        m = 0
        for s in sets:
            m |= s._mask
        return CpuSet.from_mask(m)

    # --- formatting -------------------------------------------------------
    def ranges(self) -> list[tuple[int, int]]:
        m = self._mask
        if m.bit_count() <= 64:  # a PU or core far up a big node: its bits one by one, not a text of them all
            out: list[tuple[int, int]] = []
            while m:
                low = m & -m
                i = low.bit_length() - 1
                m ^= low
                if out and out[-1][1] == i - 1:
                    out[-1] = (out[-1][0], i)
                else:
                    out.append((i, i))
            return out
        # runs of "1" in the binary text, lowest bit first: linear in the
        # mask (shifting the mask per run was quadratic on 2^19 runs)
        bits = bin(self._mask)[:1:-1]
        out = []
        a = bits.find("1")
        while a >= 0:
            b = bits.find("0", a)
            b = len(bits) if b < 0 else b
            out.append((a, b - 1))
            a = bits.find("1", b)
        return out

    def format(self) -> str:
        return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges())

    def brief(self, runs: int = 6) -> str:
        """The list syntax cut after `runs` ranges, for messages: a set of
        2^19 single PUs written out is a 7 MB line."""
        ranges = self.ranges()
        if len(ranges) <= runs:
            return self.format()
        head = CpuSet.from_mask(self._mask & ((1 << (ranges[runs - 1][1] + 1)) - 1)).format()
        return f"{head},... ({len(self)} in all, up to {ranges[-1][1]})"

    def format_mask(self) -> str:
        """sysfs-style hex mask, 32-bit words separated by commas."""
        m = self._mask
        words = []
        while True:
            words.append(f"{m & 0xFFFFFFFF:08x}")
            m >>= 32
            if not m:
                break
        return ",".join(reversed(words))

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"CpuSet('{self.format()}')"


_HEX = frozenset("0123456789abcdefABCDEF")


def _part(part: str, whole: str) -> tuple[int, int, int]:
    """One element of a list: (lo, hi, stride)."""
    part = part.strip()
    if not part:
        raise CpuSetError(f"empty element in CPU list {shown(whole, 60)}")
    stride = 1
    if ":" in part:
        part, _, s = part.partition(":")
        stride = _int(s, whole)
        if stride <= 0:
            raise CpuSetError(f"stride must be positive in {shown(whole, 60)}")
    if "-" in part:
        lo_s, _, hi_s = part.partition("-")
        lo, hi = _int(lo_s, whole), _int(hi_s, whole)
        if hi < lo:
            raise CpuSetError(f"descending range {shown(part, 60)} in {shown(whole, 60)}")
    else:
        lo = hi = _int(part, whole)
    return lo, hi, stride


def _int(s: str, whole: str) -> int:
    """A decimal index within MAX_INDEX. ASCII digits only: "²".isdigit()
    is true but int() refuses it; the length is checked before int(), which
    refuses more than 4300 digits with its own error."""
    s = s.strip()
    if not is_decimal(s, None):
        raise CpuSetError(f"bad CPU list {shown(whole, 60)}: {shown(s, 60)} is not a number")
    digits = s.lstrip("0") or "0" if len(s) > 7 else s
    if len(digits) > 7 or int(digits) > MAX_INDEX:
        raise CpuSetError(f"CPU index {shown(s, 60)} in {shown(whole, 60)} is too large: {LIMIT_TEXT}")
    return int(digits)


def _flags_to_mask(flags: bytearray) -> int:
    # one byte per index -> "0"/"1" text, highest first -> int: linear
    return int(bytes(flags[::-1]).translate(_TO_BITS), 2) if flags else 0
