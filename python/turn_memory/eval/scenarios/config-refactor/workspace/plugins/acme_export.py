"""Export invoices to Acme's AP portal (maintained by Acme's IT, vendored here)."""

from invoicer import config


def export(customer, number, body):
    return {"portal": "https://ap.acme-logistics.example/upload", "invoice": number,
            "currency": config.get("currency"), "vat_id": config.get("vat_id"), "size": len(body)}
