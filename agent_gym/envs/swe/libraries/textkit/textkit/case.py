"""Conversions between naming styles."""

SMALL_WORDS = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}


def camel_to_snake(name):
    """Turn ``parseHttpResponse`` or ``ParseHTTPResponse`` into ``parse_http_response``."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper():
            prev_lower = i > 0 and name[i - 1].islower()
            next_lower = i + 1 < len(name) and name[i + 1].islower()
            prev_upper = i > 0 and name[i - 1].isupper()
            if i > 0 and (prev_lower or (prev_upper and next_lower)):
                out.append("_")
            out.append(ch.lower())
        else:
            out.append(ch)
    return "".join(out)


def snake_to_camel(name, upper_first=False):
    """Turn ``parse_http_response`` into ``parseHttpResponse`` (``ParseHttpResponse`` with ``upper_first``)."""
    parts = [p for p in name.split("_") if p]
    if not parts:
        return ""
    head = parts[0].capitalize() if upper_first else parts[0].lower()
    return head + "".join(p.capitalize() for p in parts[1:])


def title_case(text):
    """Capitalise every word except small words that are neither first nor last."""
    words = text.split()
    result = []
    for i, word in enumerate(words):
        lower = word.lower()
        if 0 < i < len(words) - 1 and lower in SMALL_WORDS:
            result.append(lower)
        else:
            result.append(lower[:1].upper() + lower[1:])
    return " ".join(result)
