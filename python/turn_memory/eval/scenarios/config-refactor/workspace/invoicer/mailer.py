"""Send a rendered invoice."""

import smtplib
from email.message import EmailMessage

from invoicer import config


def send(to: str, subject: str, html_body: str, dry_run: bool = False) -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = config.SENDER, to, subject
    if config.BCC:
        msg["Bcc"] = config.BCC
    msg.set_content("Your invoice is attached as HTML.")
    msg.add_alternative(html_body, subtype="html")
    if not dry_run:
        with smtplib.SMTP(config.SMTP_HOST, config.SMTP_PORT) as smtp:
            smtp.send_message(msg)
    return msg
