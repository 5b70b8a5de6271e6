"""textkit: small text utilities (slugs, case conversion, wrapping, roman numerals, edit distance)."""

from textkit.case import camel_to_snake, snake_to_camel, title_case
from textkit.numerals import from_roman, to_roman
from textkit.text import edit_distance, slugify, truncate, word_wrap

__all__ = ["camel_to_snake", "edit_distance", "from_roman", "slugify", "snake_to_camel", "title_case",
           "to_roman", "truncate", "word_wrap"]
