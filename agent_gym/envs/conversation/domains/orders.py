"""``OrderService``: a shop's products, stock and customer orders (a stateful tool class).

Public state: ``products`` (sku -> name, price, stock), ``orders`` (order id -> customer,
items, status), ``next_order`` (the number of the next order id) and ``transferred``
(whether the conversation was handed to a human agent). Only pending orders can be
changed or cancelled; shipped orders can be returned.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OrderService"]


class OrderService:
    """Products, stock and orders of a small shop."""

    def __init__(self) -> None:
        self.products: dict[str, dict[str, Any]] = {}
        self.orders: dict[str, dict[str, Any]] = {}
        self.next_order: int = 1
        self.transferred: bool = False

    def _load_scenario(self, config: dict[str, Any]) -> None:
        """Load ``{"products": {...}, "orders": {...}, "next_order": n}``."""
        unknown = set(config) - {"products", "orders", "next_order"}
        if unknown:
            raise ValueError(f"expected keys 'products', 'orders', 'next_order', got unknown {sorted(unknown)}")
        products = config.get("products", {})
        for sku, item in products.items():
            if not isinstance(item, dict) or set(item) != {"name", "price", "stock"}:
                raise ValueError(f"products[{sku!r}]: expected keys 'name', 'price', 'stock', got {item!r:.80}")
        orders = config.get("orders", {})
        for oid, order in orders.items():
            if not isinstance(order, dict) or set(order) != {"customer", "items", "status"}:
                raise ValueError(f"orders[{oid!r}]: expected keys 'customer', 'items', 'status', got {order!r:.80}")
            missing = set(order["items"]) - set(products)
            if missing:
                raise ValueError(f"orders[{oid!r}]: unknown skus {sorted(missing)}")
        self.products = products
        self.orders = orders
        self.next_order = int(config.get("next_order", len(orders) + 1))

    def _order(self, order_id: str, *, pending: bool = False) -> dict[str, Any]:
        order = self.orders.get(order_id)
        if order is None:
            raise ValueError(f"no order {order_id!r}")
        if pending and order["status"] != "pending":
            raise ValueError(f"order {order_id} is {order['status']}; only pending orders can be changed")
        return order

    def _product(self, sku: str) -> dict[str, Any]:
        product = self.products.get(sku)
        if product is None:
            raise ValueError(f"no product {sku!r}")
        return product

    def list_products(self) -> list[dict[str, Any]]:
        """List every product with its sku, name, price and stock."""
        return [{"sku": sku, **item} for sku, item in sorted(self.products.items())]

    def find_orders(self, customer: str) -> list[str]:
        """Find the orders of a customer.

        Args:
            customer: The customer's name.

        Returns:
            The order ids, oldest first.
        """
        return [oid for oid, order in self.orders.items() if order["customer"] == customer]

    def get_order(self, order_id: str) -> dict[str, Any]:
        """Show an order: customer, items (sku -> quantity), status and total price.

        Args:
            order_id: The order id, e.g. 'O-3'.
        """
        order = self._order(order_id)
        total = sum(self.products[sku]["price"] * qty for sku, qty in order["items"].items())
        return {"order_id": order_id, **order, "total": round(total, 2)}

    def place_order(self, customer: str, sku: str, quantity: int) -> str:
        """Place a new order for one product; its stock goes down.

        Args:
            customer: The customer's name.
            sku: The product to order.
            quantity: How many (at least 1).

        Returns:
            The new order id.
        """
        product = self._product(sku)
        if quantity < 1:
            raise ValueError(f"quantity: expected at least 1, got {quantity}")
        if product["stock"] < quantity:
            raise ValueError(f"only {product['stock']} of {sku} in stock")
        product["stock"] -= quantity
        order_id = f"O-{self.next_order}"
        self.next_order += 1
        self.orders[order_id] = {"customer": customer, "items": {sku: quantity}, "status": "pending"}
        return order_id

    def add_item(self, order_id: str, sku: str, quantity: int) -> str:
        """Add a product to a pending order; its stock goes down.

        Args:
            order_id: The order to change.
            sku: The product to add.
            quantity: How many (at least 1).
        """
        order = self._order(order_id, pending=True)
        product = self._product(sku)
        if quantity < 1:
            raise ValueError(f"quantity: expected at least 1, got {quantity}")
        if product["stock"] < quantity:
            raise ValueError(f"only {product['stock']} of {sku} in stock")
        product["stock"] -= quantity
        order["items"][sku] = order["items"].get(sku, 0) + quantity
        return f"order {order_id} now has {order['items'][sku]} x {sku}"

    def remove_item(self, order_id: str, sku: str) -> str:
        """Remove a product from a pending order; its stock goes back up.

        Args:
            order_id: The order to change.
            sku: The product to remove.
        """
        order = self._order(order_id, pending=True)
        if sku not in order["items"]:
            raise ValueError(f"order {order_id} has no {sku}")
        if len(order["items"]) == 1:
            raise ValueError("an order keeps at least one product; cancel the order instead")
        self.products[sku]["stock"] += order["items"].pop(sku)
        return f"removed {sku} from {order_id}"

    def cancel_order(self, order_id: str) -> str:
        """Cancel a pending order; its products go back into stock.

        Args:
            order_id: The order to cancel.
        """
        order = self._order(order_id, pending=True)
        for sku, qty in order["items"].items():
            self.products[sku]["stock"] += qty
        order["status"] = "cancelled"
        return f"cancelled {order_id}"

    def return_order(self, order_id: str) -> str:
        """Return a shipped order; its products go back into stock.

        Args:
            order_id: The order to return.
        """
        order = self._order(order_id)
        if order["status"] != "shipped":
            raise ValueError(f"order {order_id} is {order['status']}; only shipped orders can be returned")
        for sku, qty in order["items"].items():
            self.products[sku]["stock"] += qty
        order["status"] = "returned"
        return f"return of {order_id} registered"

    def transfer_to_human(self, reason: str) -> str:
        """Hand the conversation over to a human agent (ends the conversation).

        Args:
            reason: A short summary of why.
        """
        self.transferred = True
        return "transferred to a human agent"
