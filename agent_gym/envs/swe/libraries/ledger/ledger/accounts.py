"""Accounts and a ledger that records every transfer."""


class LedgerError(Exception):
    """A transfer or account operation that is not allowed."""


class Account:
    """A named balance in cents; ``overdraft`` is how far below zero it may go."""

    def __init__(self, name, balance=0, overdraft=0):
        if overdraft < 0:
            raise ValueError("overdraft must be >= 0")
        self.name = name
        self.balance = balance
        self.overdraft = overdraft

    def can_pay(self, cents):
        """True when paying ``cents`` keeps the balance within the overdraft."""
        return self.balance - cents >= -self.overdraft

    def __repr__(self):
        return f"Account({self.name!r}, {self.balance})"


class Ledger:
    """Accounts by name and the journal of transfers between them."""

    def __init__(self):
        self.accounts = {}
        self.journal = []

    def open(self, name, balance=0, overdraft=0):
        """Open an account; names are unique."""
        if name in self.accounts:
            raise LedgerError(f"account {name!r} exists")
        account = Account(name, balance, overdraft)
        self.accounts[name] = account
        return account

    def get(self, name):
        """The account called ``name``."""
        try:
            return self.accounts[name]
        except KeyError:
            raise LedgerError(f"no account {name!r}") from None

    def transfer(self, source, target, cents, memo=""):
        """Move ``cents`` (> 0) from ``source`` to ``target`` and journal it; returns the entry number."""
        if cents <= 0:
            raise LedgerError("a transfer moves a positive amount")
        if source == target:
            raise LedgerError("source and target are the same account")
        payer = self.get(source)
        payee = self.get(target)
        if not payer.can_pay(cents):
            raise LedgerError(f"{source} cannot pay {cents}")
        payer.balance -= cents
        payee.balance += cents
        self.journal.append((source, target, cents, memo))
        return len(self.journal) - 1

    def history(self, name):
        """Journal entries that touch ``name``, oldest first, as signed amounts for that account."""
        self.get(name)
        moves = []
        for source, target, cents, memo in self.journal:
            if source == name:
                moves.append((-cents, memo))
            elif target == name:
                moves.append((cents, memo))
        return moves

    def total(self):
        """The sum of every balance."""
        return sum(account.balance for account in self.accounts.values())

    def reverse(self, entry):
        """Undo journal entry ``entry`` with a new transfer the other way; returns its number."""
        if not 0 <= entry < len(self.journal):
            raise LedgerError(f"no journal entry {entry}")
        source, target, cents, memo = self.journal[entry]
        return self.transfer(target, source, cents, memo=f"reversal of {entry}")

    def richest(self, count=1):
        """Names of the ``count`` largest balances, largest first (ties by name)."""
        ranked = sorted(self.accounts.values(), key=lambda a: (-a.balance, a.name))
        return [a.name for a in ranked[:count]]
