"""Display filters: units on every number, "—" where a value is undefined."""

from __future__ import annotations

from decimal import Decimal

from django import template

register = template.Library()

CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹"}


@register.filter
def rate(value: Decimal | None, currency: str = "USD") -> str:
    """A unit price as written in the price book: at least 2 decimals, no trailing noise.

    ``Decimal("2.500000000")`` → ``$2.50``; ``Decimal("0.075000000")`` → ``$0.075``.
    """
    if value is None:
        return "—"
    number = Decimal(value).normalize()
    if number.as_tuple().exponent > -2:
        number = number.quantize(Decimal("0.01"))
    symbol = CURRENCY_SYMBOLS.get(currency)
    text = f"{number:,f}"
    return f"{symbol}{text}" if symbol else f"{text} {currency}"
