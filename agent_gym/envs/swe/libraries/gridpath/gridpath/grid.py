"""A rectangular grid of cells read from text: ``#`` is a wall, anything else is open."""

WALL = "#"


def manhattan(a, b):
    """``|dx| + |dy|`` between two (row, col) cells."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


class Grid:
    """Rows of characters; cells are (row, col)."""

    def __init__(self, rows):
        if not rows:
            raise ValueError("a grid needs at least one row")
        width = len(rows[0])
        for row in rows:
            if len(row) != width:
                raise ValueError("every row must have the same width")
        self.rows = list(rows)
        self.height = len(rows)
        self.width = width

    @classmethod
    def parse(cls, text):
        """A grid from lines of text (blank lines around it are ignored)."""
        lines = [line for line in text.strip("\n").split("\n")]
        return cls(lines)

    def inside(self, cell):
        """True when the cell is on the grid."""
        row, col = cell
        return 0 <= row < self.height and 0 <= col < self.width

    def at(self, cell):
        """The character of a cell."""
        if not self.inside(cell):
            raise IndexError(f"{cell} is outside the grid")
        return self.rows[cell[0]][cell[1]]

    def is_open(self, cell):
        """True for a cell on the grid that is not a wall."""
        return self.inside(cell) and self.at(cell) != WALL

    def neighbours(self, cell, diagonal=False):
        """Open cells next to ``cell``: up, down, left, right (and the diagonals)."""
        row, col = cell
        steps = [(-1, 0), (1, 0), (0, -1), (0, 1)]
        if diagonal:
            steps += [(-1, -1), (-1, 1), (1, -1), (1, 1)]
        result = []
        for dr, dc in steps:
            nxt = (row + dr, col + dc)
            if self.is_open(nxt):
                result.append(nxt)
        return result

    def find(self, char):
        """Every cell holding ``char``, row by row."""
        return [(r, c) for r in range(self.height) for c in range(self.width) if self.rows[r][c] == char]

    def count_open(self):
        """How many cells are not walls."""
        return sum(ch != WALL for row in self.rows for ch in row)

    def render(self, path=(), mark="*"):
        """The grid as text with ``mark`` drawn on the path's open cells."""
        cells = set(path)
        lines = []
        for r in range(self.height):
            line = "".join(mark if (r, c) in cells and self.rows[r][c] == "." else self.rows[r][c]
                           for c in range(self.width))
            lines.append(line)
        return "\n".join(lines)
