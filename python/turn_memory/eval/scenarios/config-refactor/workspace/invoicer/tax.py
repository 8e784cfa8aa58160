"""VAT and totals."""

from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

from invoicer import config

_ROUNDING = {"half_up": ROUND_HALF_UP, "half_even": ROUND_HALF_EVEN}


def line_total(hours: Decimal, rate: Decimal) -> Decimal:
    return (hours * rate).quantize(Decimal("0.01"), rounding=_ROUNDING[config.ROUNDING])


def totals(lines: list[tuple[Decimal, Decimal]]) -> dict[str, Decimal]:
    net = sum((line_total(h, r) for h, r in lines), Decimal("0"))
    vat = (net * Decimal(str(config.VAT_RATE))).quantize(Decimal("0.01"), rounding=_ROUNDING[config.ROUNDING])
    return {"net": net, "vat": vat, "gross": net + vat}
