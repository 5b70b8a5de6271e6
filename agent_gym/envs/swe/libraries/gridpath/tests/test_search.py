from gridpath import Grid, flood_fill, shortest_path

MAP = """
#######
#S....#
#.###.#
#...#G#
#######
"""


def grid():
    return Grid.parse(MAP)


def test_path_ends():
    path = shortest_path(grid(), (1, 1), (3, 5))
    assert path[0] == (1, 1) and path[-1] == (3, 5)


def test_path_length():
    assert len(shortest_path(grid(), (1, 1), (3, 5))) == 7


def test_path_steps_are_adjacent():
    path = shortest_path(grid(), (1, 1), (3, 5))
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(path, path[1:]))


def test_path_to_self():
    assert shortest_path(grid(), (1, 1), (1, 1)) == [(1, 1)]


def test_path_blocked():
    g = Grid.parse("#####\n#S#G#\n#####")
    assert shortest_path(g, (1, 1), (1, 3)) is None


def test_path_from_wall():
    assert shortest_path(grid(), (0, 0), (1, 1)) is None


def test_path_diagonal_shorter():
    g = Grid.parse("....\n....\n....")
    assert len(shortest_path(g, (0, 0), (2, 2), diagonal=True)) == 3
    assert len(shortest_path(g, (0, 0), (2, 2))) == 5


def test_flood_fill_all():
    assert len(flood_fill(grid(), (1, 1))) == grid().count_open()


def test_flood_fill_distances():
    dist = flood_fill(grid(), (1, 1))
    assert dist[(1, 1)] == 0 and dist[(3, 3)] == 4 and dist[(3, 5)] == 6


def test_flood_fill_limit():
    dist = flood_fill(grid(), (1, 1), limit=2)
    assert sorted(dist) == [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1)]


def test_flood_fill_limit_zero():
    assert flood_fill(grid(), (1, 1), limit=0) == {(1, 1): 0}


def test_flood_fill_wall():
    assert flood_fill(grid(), (0, 0)) == {}
