"""Slugs, truncation, wrapping and edit distance."""

import unicodedata


def slugify(text, separator="-", max_length=None):
    """A lower-case ASCII slug: letters and digits, runs of anything else become one separator."""
    normal = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    pieces = []
    current = []
    for ch in normal.lower():
        if ch.isalnum():
            current.append(ch)
        elif current:
            pieces.append("".join(current))
            current = []
    if current:
        pieces.append("".join(current))
    slug = separator.join(pieces)
    if max_length is not None and len(slug) > max_length:
        slug = slug[:max_length].rstrip(separator)
    return slug


def truncate(text, width, ellipsis="..."):
    """Cut ``text`` to at most ``width`` characters, ending with ``ellipsis`` when cut."""
    if width < 0:
        raise ValueError("width must be >= 0")
    if len(text) <= width:
        return text
    if width <= len(ellipsis):
        return ellipsis[:width]
    return text[: width - len(ellipsis)] + ellipsis


def word_wrap(text, width):
    """Lines of at most ``width`` characters, breaking between words (a longer word stands alone)."""
    if width < 1:
        raise ValueError("width must be >= 1")
    lines = []
    line = ""
    for word in text.split():
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line = line + " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def edit_distance(a, b):
    """Levenshtein distance: insertions, deletions and substitutions each cost 1."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            cost = 0 if ca == cb else 1
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost))
        previous = current
    return previous[-1]
