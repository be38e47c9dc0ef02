"""Device experiment: which sequence makes the GPU0->GPU1 latency chase hit an illegal address."""
import sys, traceback
from nodemap.bench.harness import measure
seq = [s.split() for s in sys.argv[1:]]  # each arg: "kind opt opt..."
for kind, *argv in seq:
    try:
        rs = measure(kind, argv)
        lat = [r for r in rs.results if r.metric == "load_latency"] if hasattr(rs, "results") else []
        print(f"OK {kind} {' '.join(argv)}: {len(rs.results)} results, complete={rs.complete}",
              [f"{r.path}: {r.stats.median:.1f}" if hasattr(r.stats, 'median') else r.path for r in lat], flush=True)
    except Exception:
        print(f"CRASH {kind} {' '.join(argv)}", flush=True)
        traceback.print_exc(limit=4)
        sys.exit(3)
