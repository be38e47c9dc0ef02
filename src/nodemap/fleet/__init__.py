"""`nodemap check --fleet`: every node checked in one allocation, judged
against its peers.

- `merge`: pure: node documents (`nodefile`, read as `nodes`) -> fleet verdicts
  (`noise`, `verdicts`, `remeasure`), topology differences and the nodes' own
  findings (`findings`), link verdicts (`links`) and the ranked drain list
  (`drain`); thresholds are the expectations' [fleet] table.
- `facts`: pure: the node-independent facts of a topology compared across nodes.
- `pairs`: pure: which node pairs to test, and isolating a bad node or link.
- `driver`: the MPI side: ranks find their node, leaders run the node
  check, pair tests over the fabric, everything under deadlines.
- `html`: the fleet report page.
"""
