"""nodemap: see a multi-GPU node, bind every rank, measure every path."""

__version__ = "0.1.0"
