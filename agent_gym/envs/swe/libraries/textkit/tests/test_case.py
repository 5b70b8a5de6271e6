from textkit import camel_to_snake, snake_to_camel, title_case


def test_camel_simple():
    assert camel_to_snake("parseResponse") == "parse_response"


def test_camel_acronym():
    assert camel_to_snake("ParseHTTPResponse") == "parse_http_response"


def test_camel_leading_upper():
    assert camel_to_snake("Value") == "value"


def test_camel_already_snake():
    assert camel_to_snake("already_snake") == "already_snake"


def test_camel_trailing_acronym():
    assert camel_to_snake("getURL") == "get_url"


def test_snake_to_camel_lower():
    assert snake_to_camel("parse_http_response") == "parseHttpResponse"


def test_snake_to_camel_upper_first():
    assert snake_to_camel("parse_http_response", upper_first=True) == "ParseHttpResponse"


def test_snake_to_camel_extra_underscores():
    assert snake_to_camel("__a__b_") == "aB"


def test_snake_to_camel_empty():
    assert snake_to_camel("___") == ""


def test_title_case_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_title_case_last_small_word():
    assert title_case("what it is for") == "What It Is For"


def test_title_case_single():
    assert title_case("hELLO") == "Hello"


def test_title_case_spaces():
    assert title_case("  a   tale  ") == "A Tale"
