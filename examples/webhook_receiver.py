import os

from standardwebhooks.webhooks import Webhook

verifier = Webhook(os.environ["SLUICE_WEBHOOK_SECRET"])  # the same whsec_... secret


def on_webhook(body: bytes, headers: dict[str, str]) -> dict:
    """Call with the raw body and headers; raises if the signature or timestamp is off."""
    event = verifier.verify(body, headers)  # refuses timestamps over 5 minutes away
    if event["type"] == "job.succeeded":
        print(event["data"]["id"], event["data"]["result"])
    return event  # a retry can arrive twice: its headers["webhook-id"] is the same
