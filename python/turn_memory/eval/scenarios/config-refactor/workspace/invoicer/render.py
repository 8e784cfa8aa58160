"""Invoice HTML (printed to PDF by the office's browser)."""

import datetime as dt
import html

from invoicer import config, tax


def render(customer: dict, number: str, issued: dt.date, lines: list[dict]) -> str:
    t = tax.totals([(l["hours"], l["rate"]) for l in lines])
    due = issued + dt.timedelta(days=config.PAYMENT_DAYS)
    rows = "".join(f"<tr><td>{html.escape(l['text'])}</td><td>{l['hours']}</td><td>{l['rate']}</td>"
                   f"<td>{tax.line_total(l['hours'], l['rate'])}</td></tr>" for l in lines)
    return (f"<h1>{html.escape(config.COMPANY_NAME)}</h1><p>Invoice {number}, {issued:%d.%m.%Y}, due {due:%d.%m.%Y}</p>"
            f"<p>To: {html.escape(customer['name'])}</p><table>{rows}</table>"
            f"<p>Net {t['net']} {config.CURRENCY}, VAT {config.VAT_RATE:.0%} {t['vat']}, total {t['gross']}</p>"
            f"<p>VAT ID {config.VAT_ID} · IBAN {config.IBAN}</p>")
