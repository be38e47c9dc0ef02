"""Integer arithmetic of spreading: tasks over domains, objects over tasks.

Pure list math, no topology: weights in, counts or slices out. Ties always
go to the earlier item, so the same input gives the same answer.
"""

from __future__ import annotations


def apportion(total: int, weights: list[int], caps: list[int] | None = None) -> list[int]:
    """Split `total` over items in proportion to `weights` (largest
    remainder), at least one per positive weight when total allows, never
    above `caps`. Returns counts; their sum is total unless caps stop it."""
    n = len(weights)
    counts = [0] * n
    live = [i for i in range(n) if weights[i] > 0 and (caps is None or caps[i] > 0)]
    left = total
    while left > 0 and live:
        w = sum(weights[i] for i in live)
        share = [left * weights[i] / w for i in live]
        add = [int(s) for s in share]
        if left >= len(live):
            add = [max(a, 1) for a in add]
        rest = left - sum(add)
        by_rem = sorted(range(len(live)), key=lambda j: (-(share[j] - int(share[j])), j))
        for j in by_rem[: max(rest, 0)]:
            add[j] += 1
        while sum(add) > left:  # the max(.,1) floor overshot: take back from the largest
            j = max((j for j in range(len(live)) if add[j] > 1), key=lambda j: (add[j] - share[j], -j))
            add[j] -= 1
        spill = 0
        for j, i in enumerate(live):
            room = add[j] if caps is None else min(add[j], caps[i] - counts[i])
            counts[i] += room
            spill += add[j] - room
        left = spill
        live = [i for i in live if caps is None or counts[i] < caps[i]]
    return counts


def blocks(n: int, k: int) -> list[tuple[int, int]]:
    """Cut range(n) into k contiguous slices whose sizes differ by at most
    one, the larger ones first. With k > n slices repeat (sharing)."""
    if k > n:
        return [(i * n // k, i * n // k + 1) for i in range(k)]
    q, r = divmod(n, k)
    out = []
    start = 0
    for i in range(k):
        size = q + (1 if i < r else 0)
        out.append((start, start + size))
        start += size
    return out


def split_balanced(weights: list[int], k: int) -> list[tuple[int, int]]:
    """Cut the list into k non-empty contiguous slices of near-equal weight."""
    n = len(weights)
    out = []
    i = 0
    for g in range(k):
        left_groups = k - g
        if left_groups == 1:
            out.append((i, n))
            break
        target = sum(weights[i:]) / left_groups
        j, acc = i + 1, weights[i]
        while n - j > left_groups - 1 and abs(acc + weights[j] - target) < abs(acc - target):
            acc += weights[j]
            j += 1
        out.append((i, j))
        i = j
    return out
