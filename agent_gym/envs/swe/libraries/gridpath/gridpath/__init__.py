"""gridpath: text maps, neighbours, distances and shortest paths on a grid."""

from gridpath.grid import Grid, manhattan
from gridpath.search import flood_fill, shortest_path

__all__ = ["Grid", "flood_fill", "manhattan", "shortest_path"]
