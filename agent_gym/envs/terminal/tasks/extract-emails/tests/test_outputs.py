from pathlib import Path


def test_emails():
    assert Path("/app/emails.txt").read_text().split() == ["ann@example.org", "bob.smith@mail.example.com", "zed@x.io"]
