"""Settings, read once at import from invoicer.ini and the environment.

Every setting is a module global; code reads them as `config.VAT_RATE` etc. Environment
variables override the file: INVOICER_VAT_RATE, INVOICER_SMTP_PORT, ...
"""

import configparser
import os
from pathlib import Path

_PATH = Path(os.environ.get("INVOICER_CONFIG", Path(__file__).resolve().parent.parent / "invoicer.ini"))
_ini = configparser.ConfigParser()
_ini.read(_PATH)


def _get(section, key, default=None):
    env = os.environ.get(f"INVOICER_{key.upper()}")
    if env is not None:
        return env
    return _ini.get(section, key, fallback=default)


COMPANY_NAME = _get("company", "name", "")
VAT_ID = _get("company", "vat_id", "")
IBAN = _get("company", "iban", "")

CURRENCY = _get("invoice", "currency", "EUR")
VAT_RATE = float(_get("invoice", "vat_rate", "0.19"))
PAYMENT_DAYS = int(_get("invoice", "payment_days", "14"))
NUMBER_PREFIX = _get("invoice", "number_prefix", "INV-")
ROUNDING = _get("invoice", "rounding", "half_up")

SMTP_HOST = _get("mail", "smtp_host", "localhost")
SMTP_PORT = int(_get("mail", "smtp_port", "25"))
SENDER = _get("mail", "sender", "")
BCC = _get("mail", "bcc", "")

PLUGINS = [p.strip() for p in _get("plugins", "enabled", "").split(",") if p.strip()]


def get(name, default=None):
    """Look a setting up by its global's name (used by plugins)."""
    return globals().get(name.upper(), default)
