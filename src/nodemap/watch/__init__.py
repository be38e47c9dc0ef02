"""`nodemap run --watch`: the per-rank memory monitor, its timelines and their analysis.

Empty on purpose: the launch path imports `monitor` only when --watch is given.
"""
