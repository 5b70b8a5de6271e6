import pytest

from ledger import Account, Ledger, LedgerError


def make():
    book = Ledger()
    book.open("alice", 1000)
    book.open("bob", 500, overdraft=200)
    book.open("carol")
    return book


def test_open_duplicate():
    book = make()
    with pytest.raises(LedgerError):
        book.open("alice")


def test_get_missing():
    with pytest.raises(LedgerError, match="no account"):
        make().get("dave")


def test_transfer_moves_money():
    book = make()
    book.transfer("alice", "carol", 300)
    assert book.get("alice").balance == 700 and book.get("carol").balance == 300


def test_transfer_returns_entry_number():
    book = make()
    assert book.transfer("alice", "bob", 1) == 0
    assert book.transfer("alice", "bob", 1) == 1


def test_transfer_exact_balance():
    book = make()
    book.transfer("alice", "bob", 1000)
    assert book.get("alice").balance == 0


def test_transfer_insufficient():
    book = make()
    with pytest.raises(LedgerError):
        book.transfer("alice", "bob", 1001)
    assert book.get("alice").balance == 1000 and book.journal == []


def test_transfer_overdraft():
    book = make()
    book.transfer("bob", "carol", 700)
    assert book.get("bob").balance == -200
    with pytest.raises(LedgerError):
        book.transfer("bob", "carol", 1)


def test_transfer_non_positive():
    book = make()
    with pytest.raises(LedgerError):
        book.transfer("alice", "bob", 0)


def test_transfer_same_account():
    with pytest.raises(LedgerError):
        make().transfer("alice", "alice", 5)


def test_total_conserved():
    book = make()
    before = book.total()
    book.transfer("alice", "bob", 250)
    book.transfer("bob", "carol", 600)
    assert book.total() == before == 1500


def test_history():
    book = make()
    book.transfer("alice", "bob", 10, memo="lunch")
    book.transfer("carol", "alice", 0 + 5, memo="x") if book.get("carol").can_pay(5) else None
    book.transfer("bob", "alice", 3, memo="change")
    assert book.history("alice") == [(-10, "lunch"), (3, "change")]
    assert book.history("bob") == [(10, "lunch"), (-3, "change")]


def test_history_missing_account():
    with pytest.raises(LedgerError):
        make().history("zed")


def test_reverse():
    book = make()
    entry = book.transfer("alice", "carol", 400)
    again = book.reverse(entry)
    assert again == 1
    assert book.get("alice").balance == 1000 and book.get("carol").balance == 0
    assert book.journal[1] == ("carol", "alice", 400, "reversal of 0")


def test_reverse_missing():
    with pytest.raises(LedgerError):
        make().reverse(0)


def test_richest():
    book = make()
    assert book.richest() == ["alice"]
    assert book.richest(2) == ["alice", "bob"]


def test_richest_ties():
    book = Ledger()
    book.open("zoe", 5)
    book.open("amy", 5)
    assert book.richest(2) == ["amy", "zoe"]


def test_account_can_pay():
    acct = Account("x", 100, overdraft=50)
    assert acct.can_pay(150) and not acct.can_pay(151)


def test_account_negative_overdraft():
    with pytest.raises(ValueError):
        Account("x", overdraft=-1)


def test_account_repr():
    assert repr(Account("x", 7)) == "Account('x', 7)"
