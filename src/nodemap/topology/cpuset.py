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

__all__ = ["CpuSet", "CpuSetError"]


class CpuSetError(ValueError):
    """A CPU/NUMA list or mask that cannot be parsed."""


class CpuSet:
    __slots__ = ("_mask",)

    def __init__(self, items: Iterable[int] = ()) -> None:
        mask = 0
        for i in items:
            if i < 0:
                raise CpuSetError(f"negative index {i} in a CPU set")
            mask |= 1 << i
        self._mask = mask

    # --- construction -------------------------------------------------
    @classmethod
    def from_mask(cls, mask: int) -> "CpuSet":
        if mask < 0:
            raise CpuSetError("negative mask")
        s = cls.__new__(cls)
        s._mask = mask
        return s

    @classmethod
    def parse(cls, text: str) -> "CpuSet":
        """Parse list syntax: "0-3,8-11", "0-15:2" (stride), "" (empty)."""
        text = text.strip()
        mask = 0
        if not text:
            return cls.from_mask(0)
        for part in text.split(","):
            part = part.strip()
            if not part:
                raise CpuSetError(f"empty element in CPU list {text!r}")
            stride = 1
            if ":" in part:
                part, _, s = part.partition(":")
                stride = _int(s, text)
                if stride <= 0:
                    raise CpuSetError(f"stride must be positive in {text!r}")
            if "-" in part:
                lo_s, _, hi_s = part.partition("-")
                lo, hi = _int(lo_s, text), _int(hi_s, text)
                if hi < lo:
                    raise CpuSetError(f"descending range {part!r} in {text!r}")
                if stride == 1:
                    mask |= ((1 << (hi - lo + 1)) - 1) << lo
                else:
                    for i in range(lo, hi + 1, stride):
                        mask |= 1 << i
            else:
                mask |= 1 << _int(part, text)
        return cls.from_mask(mask)

    @classmethod
    def parse_mask(cls, text: str) -> "CpuSet":
        """Parse a hex mask: sysfs "00000000,0000ffff" or hwloc "0x0000ffff,0x0".

        hwloc writes "0xf...f,,0x..." style infinite sets as "0xf...f"; a
        leading run of 'f' words in hwloc means "and all beyond", which we
        cannot hold, so such sets are truncated to the words written.
        """
        text = text.strip()
        if not text:
            return cls.from_mask(0)
        words = text.split(",")
        joined = "".join(words)
        if len(joined) == 8 * len(words) and "x" not in joined and "X" not in joined:
            try:  # sysfs: every word 8 hex digits, so the words simply concatenate
                return cls.from_mask(int(joined, 16))
            except ValueError:
                pass  # a bad digit: the loop below names the error
        mask = 0
        for word in words:
            word = word.strip()
            if word.lower().startswith("0x"):
                word = word[2:]
            if word == "":
                word = "0"
            try:
                val = int(word, 16)
            except ValueError:
                raise CpuSetError(f"bad hex mask {text!r}") from None
            mask = (mask << 32) | val
        return cls.from_mask(mask)

    # --- views ----------------------------------------------------------
    @property
    def mask(self) -> int:
        return self._mask

    def __iter__(self) -> Iterator[int]:
        m = self._mask
        while m:
            low = m & -m
            yield low.bit_length() - 1
            m ^= low

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
        out: list[tuple[int, int]] = []
        m = self._mask
        base = 0
        while m:
            tz = (m & -m).bit_length() - 1
            m >>= tz
            base += tz
            run = (~m & (m + 1)).bit_length() - 1  # length of the run of ones
            out.append((base, base + run - 1))
            m >>= run
            base += run
        return out

    def format(self) -> str:
        return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges())

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


def _int(s: str, whole: str) -> int:
    s = s.strip()
    if not s.isdigit():
        raise CpuSetError(f"bad CPU list {whole!r}: {s!r} is not a number")
    return int(s)
