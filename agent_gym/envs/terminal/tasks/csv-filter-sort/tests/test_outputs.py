
import csv


def test_rows():
    rows = list(csv.reader(open("/app/adults.csv")))
    assert rows[0] == ["name", "age", "city"]
    assert [r[0] for r in rows[1:]] == ["cy", "al", "bo", "ed"]
