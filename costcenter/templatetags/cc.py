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


def _symbol_amount(text: str, currency: str, negative: bool) -> str:
    symbol = CURRENCY_SYMBOLS.get(currency)
    sign = "−" if negative else ""
    return f"{sign}{symbol}{text}" if symbol else f"{sign}{text} {currency}"


@register.filter
def money(value: Decimal | None, currency: str = "USD") -> str:
    """An amount rounded half-even to the currency's minor unit: ``$1,234.57``; "—" when unknown.

    Amounts that round to zero but are not zero show as ``<$0.01`` so a tiny cost never reads as free.
    """
    from costcenter.money import round_for_display

    if value is None:
        return "—"
    amount = Decimal(value)
    shown = round_for_display(abs(amount), currency)
    if shown == 0 and amount != 0:
        return (
            ("−" if amount < 0 else "")
            + "<"
            + _symbol_amount(f"{Decimal(1).scaleb(shown.as_tuple().exponent)}", currency, False)
        )
    places = max(0, -shown.as_tuple().exponent)
    return _symbol_amount(f"{shown:,.{places}f}", currency, amount < 0 and shown != 0)


@register.filter
def money_precise(value: Decimal | None, currency: str = "USD") -> str:
    """A small per-unit amount (cost per task, per 1M tokens): 4 significant digits below one cent."""
    if value is None:
        return "—"
    amount = Decimal(value)
    if abs(amount) >= 1 or amount == 0:
        return money(amount, currency)
    text = f"{abs(amount):.4g}"
    if "e" in text:
        text = f"{abs(amount):.10f}".rstrip("0")
    return _symbol_amount(text, currency, amount < 0)


@register.filter
def signed_money(value: Decimal | None, currency: str = "USD") -> str:
    """A change of money with its sign: ``+$12.00`` / ``−$3.50``."""
    if value is None:
        return "—"
    text = money(value, currency)
    return text if text.startswith("−") else f"+{text}"


def _scaled(value: float, units: tuple[tuple[float, str], ...]) -> str:
    for size, suffix in units:
        if abs(value) >= size:
            number = value / size
            return f"{number:,.1f}{suffix}" if abs(number) < 100 else f"{number:,.0f}{suffix}"
    return f"{value:,.0f}"


@register.filter
def tokens(value: int | float | None) -> str:
    """A token count with units: ``950 tokens``, ``12.3k tokens``, ``4.1M tokens``, ``2.0B tokens``."""
    if value is None:
        return "—"
    return _scaled(float(value), ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))) + " tokens"


@register.filter
def count(value: int | float | None) -> str:
    """A whole count with thousands separators; "—" when undefined."""
    if value is None:
        return "—"
    return f"{value:,.0f}"


@register.filter
def pct(value: float | Decimal | None, places: int = 1) -> str:
    """A ratio (0–1) as a percentage: ``0.9731`` → ``97.3%``; "—" when undefined."""
    if value is None:
        return "—"
    return f"{float(value) * 100:,.{int(places)}f}%"


@register.filter
def change_pct(value: float | None) -> str:
    """A relative change with its sign: ``+12.5%``, ``−3.0%``; "—" when there is nothing to compare."""
    if value is None:
        return "—"
    text = f"{abs(value) * 100:,.1f}%"
    return ("+" if value > 0 else "−" if value < 0 else "±") + text


@register.filter
def number(value: float | Decimal | None, places: int = 1) -> str:
    if value is None:
        return "—"
    return f"{float(value):,.{int(places)}f}"


@register.filter
def ms(value: float | None) -> str:
    """A duration in milliseconds: ``850 ms``, ``1.42 s``."""
    if value is None:
        return "—"
    return f"{value:,.0f} ms" if value < 1000 else f"{value / 1000:,.2f} s"


@register.filter
def mib(value: float | None) -> str:
    """Memory in MiB as GiB/TiB: ``612.4 GiB``."""
    if value is None:
        return "—"
    gib = value / 1024
    return f"{gib / 1024:,.2f} TiB" if gib >= 1024 else f"{gib:,.1f} GiB"


@register.filter
def duration(seconds: int | None) -> str:
    """A lag in seconds as ``45 s``, ``12 min``, ``3.5 h``, ``2.1 days``."""
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.1f} days"


@register.filter
def fmt(value, kind: str) -> str:
    """Format ``value`` by kind: money, money_precise, count, pct, tokens, ms, mib, rate (tokens/s)."""
    from django.conf import settings

    currency = settings.CURRENCY
    if kind == "money":
        return money(value, currency)
    if kind == "money_precise":
        return money_precise(value, currency)
    if kind == "pct":
        return pct(value)
    if kind == "tokens":
        return tokens(value)
    if kind == "ms":
        return ms(value)
    if kind == "mib":
        return mib(value)
    if kind == "rate":
        return "—" if value is None else f"{float(value):,.0f} tok/s"
    return count(value)


@register.filter
def get(mapping, key):
    """``mapping[key]`` in a template (None when absent)."""
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def points(value: float | None) -> str:
    """A change of a rate in percentage points: ``+1.2 pp``."""
    if value is None:
        return "—"
    text = f"{abs(value) * 100:,.1f} pp"
    return ("+" if value > 0 else "−" if value < 0 else "±") + text
