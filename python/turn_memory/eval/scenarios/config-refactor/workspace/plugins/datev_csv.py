"""DATEV booking export for the tax accountant (maintained by the accountant's office)."""

from invoicer import config


def export(customer, number, body):
    rate = config.get("VAT_RATE")
    return f"{number};{customer['name']};{config.get('CURRENCY')};{rate:.2f}\n"
