"""Breadth-first searches on a grid."""

from collections import deque


def shortest_path(grid, start, goal, diagonal=False):
    """The cells of a shortest path from ``start`` to ``goal`` (both included), or None."""
    if not grid.is_open(start) or not grid.is_open(goal):
        return None
    previous = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for nxt in grid.neighbours(cell, diagonal=diagonal):
            if nxt not in previous:
                previous[nxt] = cell
                queue.append(nxt)
    if goal not in previous:
        return None
    path = []
    cell = goal
    while cell is not None:
        path.append(cell)
        cell = previous[cell]
    path.reverse()
    return path


def flood_fill(grid, start, limit=None):
    """Every open cell reachable from ``start`` within ``limit`` steps (no limit with None), with its distance."""
    if not grid.is_open(start):
        return {}
    distance = {start: 0}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if limit is not None and distance[cell] >= limit:
            continue
        for nxt in grid.neighbours(cell):
            if nxt not in distance:
                distance[nxt] = distance[cell] + 1
                queue.append(nxt)
    return distance
