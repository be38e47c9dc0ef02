"""The GPU latency chase waits for CuPy's asynchronous set-up before it runs.

CuPy copies a host array to a device asynchronously (pinned staging on the
current stream) and zeroes on the current stream; the chase runs on another
non-blocking stream, possibly of another GPU, that waits for neither. On 2
H100s the unsynchronized peer chase walked a half-written cycle and hit an
illegal address. A recording stand-in for CuPy checks the order here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from nodemap.bench import driver
from nodemap.bench.gpu import common as gc
from nodemap.bench.gpu import latency as gl


class Recorder:
    def __init__(self, want: int) -> None:
        self.log: list[str] = []
        self.current = 0
        self.want = want
        rec = self

        class Device:
            def __init__(self, ordinal=None):
                self.ordinal = rec.current if ordinal is None else ordinal

            def __enter__(self):
                self.prev, rec.current = rec.current, self.ordinal

            def __exit__(self, *exc):
                rec.current = self.prev

            def synchronize(self):
                rec.log.append(f"sync {self.ordinal}")

        self.cuda = SimpleNamespace(Device=Device)

    def asarray(self, a):
        self.log.append(f"asarray on {self.current}")
        return SimpleNamespace(data=SimpleNamespace(ptr=4096))

    def zeros(self, n, dtype):
        self.log.append(f"zeros on {self.current}")
        return SimpleNamespace(get=lambda: np.array([self.want], dtype=np.uint64))


def test_the_peer_chase_starts_after_its_chain_and_result_are_in_place(monkeypatch):
    ws = 64 << 20
    nxt, order = gl.cycle(ws // gl.LINE)
    cp = Recorder(gl.end_of_walk(order, gl.STEPS))
    monkeypatch.setattr(gl, "_ws", lambda b, g: ws)
    monkeypatch.setattr(gl, "cycle", lambda slots: (nxt, order))
    monkeypatch.setattr(gc, "ensure_free", lambda *a: None)
    monkeypatch.setattr(gc, "kernel", lambda *a: (lambda *args, **kw: None))

    def timed(cp_, gate, jobs):
        cp.log.append(f"chase on {jobs[0].device}")
        return [1e-3]

    monkeypatch.setattr(gc, "time_streams", timed)
    g = SimpleNamespace(ordinal=0, key="GPU0", l2_bytes=50 << 20)
    owner = SimpleNamespace(ordinal=1, key="GPU1")
    b = SimpleNamespace(cp=cp, gate=None, streams={0: ["s0"]}, repeats=2)
    [r] = driver.measure_case(gl.Chase(b, g, "GPU1", "GPU0 -> GPU1 memory", "NV18", owner=owner),
                              driver.Repeats(count=2, warmup=1))
    log = cp.log
    first_chase = log.index("chase on 0")
    assert log.index("asarray on 1") < log.index("sync 1") < first_chase
    assert log.index("zeros on 0") < log.index("sync 0") < first_chase
    assert r.params["dst"] == "GPU1"
    assert log.count("chase on 0") == 3 and r.stats.n == 2  # through the driver's loop: a warm-up, then 2 timed
