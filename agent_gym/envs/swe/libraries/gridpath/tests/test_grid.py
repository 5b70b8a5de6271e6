import pytest

from gridpath import Grid, manhattan

MAP = """
#####
#S..#
#.#.#
#..G#
#####
"""


@pytest.fixture
def grid():
    return Grid.parse(MAP)


def test_parse_size(grid):
    assert (grid.height, grid.width) == (5, 5)


def test_ragged_rows():
    with pytest.raises(ValueError):
        Grid(["##", "#"])


def test_no_rows():
    with pytest.raises(ValueError):
        Grid([])


def test_inside(grid):
    assert grid.inside((0, 0)) and grid.inside((4, 4))
    assert not grid.inside((5, 0)) and not grid.inside((0, -1))


def test_at(grid):
    assert grid.at((1, 1)) == "S"


def test_at_outside(grid):
    with pytest.raises(IndexError):
        grid.at((9, 9))


def test_is_open(grid):
    assert grid.is_open((1, 2))
    assert not grid.is_open((0, 0))
    assert not grid.is_open((-1, 2))


def test_neighbours(grid):
    assert sorted(grid.neighbours((1, 1))) == [(1, 2), (2, 1)]


def test_neighbours_diagonal(grid):
    assert sorted(grid.neighbours((2, 1), diagonal=True)) == [(1, 1), (1, 2), (3, 1), (3, 2)]


def test_find(grid):
    assert grid.find("G") == [(3, 3)]
    assert grid.find("x") == []


def test_count_open(grid):
    assert grid.count_open() == 8


def test_render_path(grid):
    assert grid.render([(1, 2), (1, 3)]).split("\n")[1] == "#S**#"


@pytest.mark.parametrize("a,b,d", [((0, 0), (0, 0), 0), ((0, 0), (2, 3), 5), ((4, 1), (1, 4), 6)])
def test_manhattan(a, b, d):
    assert manhattan(a, b) == d
