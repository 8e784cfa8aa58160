"""python3 -m invoicer.cli run --month YYYY-MM [--dry-run]"""

import argparse
import datetime as dt
import importlib

from invoicer import config, mailer, numbering, render


def load_plugins():
    return [importlib.import_module(f"plugins.{name}") for name in config.PLUGINS]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="invoicer")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--month", required=True)
    run.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    year = int(args.month[:4])
    plugins = load_plugins()
    issued = dt.date.today()
    for customer in [{"name": "Acme Logistics AG", "email": "ap@acme-logistics.example"}]:
        number = numbering.next_number(year)
        body = render.render(customer, number, issued, [])
        mailer.send(customer["email"], f"Invoice {number}", body, dry_run=args.dry_run)
        for plugin in plugins:
            plugin.export(customer, number, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
