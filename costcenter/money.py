"""Money and rate precision, in one place.

Rates (per 1M tokens, per GPU-hour, per kWh) and amounts are ``Decimal`` from parse to display.
Amounts are kept unrounded (12 decimal places) and rounded half-even to the currency's minor
unit only for display and export, by ``round_for_display``.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from django.db import models

RATE_MAX_DIGITS = 20
RATE_DECIMAL_PLACES = 9
AMOUNT_MAX_DIGITS = 30
AMOUNT_DECIMAL_PLACES = 12
WEIGHT_MAX_DIGITS = 12
WEIGHT_DECIMAL_PLACES = 6

TOKENS_PER_PRICE_UNIT = 1_000_000  # token prices are quoted per 1M tokens

# Minor units of the currencies we expect; anything else is shown with 2 decimals.
_MINOR_UNITS = {"JPY": 0, "KRW": 0, "BHD": 3, "KWD": 3}


def rate_field(**kwargs) -> models.DecimalField:
    return models.DecimalField(max_digits=RATE_MAX_DIGITS, decimal_places=RATE_DECIMAL_PLACES, **kwargs)


def weight_field(**kwargs) -> models.DecimalField:
    return models.DecimalField(max_digits=WEIGHT_MAX_DIGITS, decimal_places=WEIGHT_DECIMAL_PLACES, **kwargs)


def parse_decimal(value: object) -> Decimal | None:
    """A finite Decimal from a string or int, or None; floats are refused (they are already rounded)."""
    if isinstance(value, bool) or isinstance(value, float):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str):
        return None
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def fits_rate(value: Decimal) -> bool:
    """True when the value can be stored in a rate column without losing digits."""
    integer_digits = RATE_MAX_DIGITS - RATE_DECIMAL_PLACES
    return (
        value == value.quantize(Decimal(1).scaleb(-RATE_DECIMAL_PLACES)) and abs(value) < 10**integer_digits
    )


def round_for_display(amount: Decimal, currency: str) -> Decimal:
    places = _MINOR_UNITS.get(currency.upper(), 2)
    return amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
