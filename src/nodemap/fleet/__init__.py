"""`nodemap check --fleet`: every node checked in one allocation, judged
against its peers.

- `merge`: pure: node documents -> fleet verdicts, topology differences,
  link verdicts and the ranked drain list (thresholds as data).
- `facts`: pure: the node-independent facts of a topology compared across nodes.
- `pairs`: pure: which node pairs to test, and isolating a bad node or link.
- `driver`: the MPI side: ranks find their node, leaders run the node
  check, pair tests over the fabric, everything under deadlines.
- `html`: the fleet report page.
"""
