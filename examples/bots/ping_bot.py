"""A Circle bot in Python: answers "@NAME ping" with "pong" (docs/API.md, "Bots that answer").

Only the standard library and the `standardwebhooks` package (`pip install standardwebhooks`).
It listens for Circle's webhook deliveries, verifies each signature, and answers a post that
mentions it with a JSON reply, which Circle posts as the bot in the same circle:

    circle admin bot pingbot                                   # the bot's account
    circle admin webhook add http://bots.example.com:8000/ --event post --bot pingbot
    WEBHOOK_SECRET=whsec_… BOT_NAME=pingbot python3 ping_bot.py --port 8000

Circle may deliver an entry more than once (after a failure or a node's crash): the reply to
a second delivery is the same post, stored once (its id is the delivery's `webhook-id`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

MAX_BODY = 1 << 20


def reply_to(event: dict, bot: str) -> str | None:
    """The answer to one delivered entry, or None."""
    if event.get("type") != "post":
        return None
    entry = event.get("data", {}).get("entry") or {}
    words = (entry.get("text") or "").lower().split()
    if f"@{bot}" in words and "ping" in words:
        return f"pong, @{entry.get('author')}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description="A Circle bot that answers @NAME ping with pong.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on start)")
    args = parser.parse_args()
    verifier = Webhook(os.environ["WEBHOOK_SECRET"])
    bot = os.environ.get("BOT_NAME", "pingbot").lower()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            if length > MAX_BODY:
                self.send_error(413)
                return
            body = self.rfile.read(length)
            try:
                event = verifier.verify(body, dict(self.headers.items()))
            except WebhookVerificationError:
                self.send_error(401)
                return
            answer = reply_to(event, bot)
            payload = json.dumps({"text": answer}).encode() if answer else b""
            self.send_response(200 if answer else 204)
            if answer:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"ping bot listening on http://{args.host}:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
