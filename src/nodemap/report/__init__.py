"""Reports of saved results: a one-screen terminal summary, one JSON
document, one self-contained HTML file with plots, comparisons, and node_exporter's
Prometheus text (prom.py).
Reads only Results, check documents and a Topology; never measures."""
