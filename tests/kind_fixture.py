"""A benchmark kind in one file (tests/test_kind_story.py): `bench bytecopy`
copies a host buffer twice over (two peers: each is judged against the
other), verified. Its options, cases and whole story are here; registering
it is one line in bench/kinds.py's BENCHES (the test adds that line in each
process it starts)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any, Sequence

import msgspec

from nodemap.bench.driver import Case, PartFailed, Plan
from nodemap.bench.figures import Figure, Given, figure
from nodemap.bench.options import Common, option
from nodemap.bench.results import Failure, Result, ResultSet, make_result
from nodemap.bench.story import Cost, Count, Node, Probe, ResultParams, Seen, Step, Story
from nodemap.finding import Finding
from nodemap.units import format_size, gbps, parse_size

KIND = "bytecopy"
DESCRIPTION = "Host memory copy bandwidth of two buffers (a kind in one file, for tests)."
EPILOG = ""


@dataclass(frozen=True, kw_only=True)
class Options(Common):
    size: str | None = option(None, "bytes per buffer (default 1 MiB)", metavar="BYTES")
    corrupt: bool = option(False, "corrupt the second copy (a part that fails)")


class Copy(Case):
    def __init__(self, part: int, nbytes: int, corrupt: bool) -> None:
        self.part, self.nbytes, self.corrupt, self.label = part, nbytes, corrupt, f"copy {part}"

    def setup(self) -> None:
        self.src = bytes(range(256)) * (self.nbytes // 256)

    def run(self) -> float:
        t = time.perf_counter()
        self.dst = bytearray(self.src)
        return time.perf_counter() - t

    def verify(self) -> None:
        if self.corrupt:
            self.dst[0] ^= 1
        if self.dst != self.src:
            raise PartFailed(Failure(KIND, f"copy{self.part}", "host buffer copies", "the source's bytes",
                                     "a byte differs", message=f"copy {self.part}: a byte differs from the source"))

    def results(self, samples: list[float]) -> list[Result]:
        return [make_result(KIND, "copy", "GB/s", gbps(self.nbytes, samples), verified=True,
                            params={"part": self.part, "bytes": self.nbytes}, path="host memory",
                            verification="every byte compared with the source")]


def plan(opts: Options) -> Plan:
    n = parse_size(opts.size, "--size", minimum=256) if opts.size else 1 << 20
    return Plan(f"bench {KIND}", [Copy(0, n, False), Copy(1, n, opts.corrupt)],
                lambda rs: "\n".join(f"{r.metric} {r.params['part']}: {r.stats.best:.2f} {r.unit}" for r in rs.results))


# --- its story ------------------------------------------------------------------------------------


class Params(ResultParams):
    part: Count
    bytes: Annotated[int, msgspec.Meta(ge=256)]


def figures(results: list[Result], given: Given) -> list[Figure]:
    return [figure(r, f"{KIND}/{r.params['part']}", "host memory",
                   f"copy {r.params['part']} of {format_size(r.params['bytes'])}", group=f"{KIND}/copy")
            for r in results]


def steps(node: Node) -> list[Step]:
    return [Step(what="host buffer copies", options=Options(size="64K" if node.tiny else None, repeats=5))]


def cause(f: Failure, forced: Sequence[str]) -> tuple[str, str]:
    return "hardware", "test the DIMMs (memtester), then run nodemap bench bytecopy again"


def finding(seen: Seen) -> Finding | None:
    if not seen.figure.key.startswith(f"{KIND}/"):
        return None  # STREAM's, of the same area
    return seen.say("hardware", f"{seen.figure.label}: {seen.value}{seen.relative}, slower than its peer",
                    "test the DIMMs (memtester)")


def kept(rs: ResultSet, node: int) -> Any:
    return next((r for r in rs.results if r.params.get("part") == 0), None)


STORY = Story(params=Params, figures=figures, finding=finding, areas=("host memory",), steps=steps, priority=45,
              cost={"quick": Cost(base=0.5), "full": Cost(base=1.0)}, cause=cause,
              probes=(Probe(KIND, "GB/s", lambda threads, size: Options(size=size, repeats=5), kept),))
