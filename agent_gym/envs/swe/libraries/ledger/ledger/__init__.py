"""ledger: money amounts in cents, accounts, transfers and a journal."""

from ledger.accounts import Account, Ledger, LedgerError
from ledger.money import format_cents, parse_amount, split_evenly

__all__ = ["Account", "Ledger", "LedgerError", "format_cents", "parse_amount", "split_evenly"]
