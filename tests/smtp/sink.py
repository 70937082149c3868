"""A real SMTP server for the mail tests (aiosmtpd): every message it accepts is written to
DIR as NNNN.json ({"mail_from", "rcpt_tos", "data", and the decoded "from", "to",
"subject", "body"}), written to a temporary name first so
a reader never sees half a file.

    python sink.py DIR [--port N] [--auth USER:PASSWORD] [--tls-cert PEM --tls-key PEM]

--auth requires AUTH PLAIN/LOGIN with those credentials (allowed without TLS, as a local
relay may); --tls-cert/--tls-key offer STARTTLS and require it before MAIL. Prints
"listening PORT" once it accepts connections and runs until killed.
"""

import argparse
import asyncio
import email
import email.policy
import json
import os
import socket
import ssl
import sys

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Sink:
    def __init__(self, directory):
        self.directory = directory
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "data": envelope.content.decode("utf-8", "replace"),
            # Decoded (transfer encoding undone), so tests read links as sent.
            "from": str(message["From"]),
            "to": str(message["To"]),
            "subject": str(message["Subject"]),
            "body": message.get_content(),
        }
        path = os.path.join(self.directory, "%04d.json" % self.count)
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.rename(path + ".tmp", path)
        return "250 OK"


def authenticator(user, password):
    def check(server, session, envelope, mechanism, auth_data):
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        ok = auth_data.login.decode() == user and auth_data.password.decode() == password
        return AuthResult(success=ok)

    return check


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--auth")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    port = args.port
    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    kwargs = {}
    if args.auth:
        user, password = args.auth.split(":", 1)
        kwargs.update(
            authenticator=authenticator(user, password),
            auth_required=True,
            auth_require_tls=False,
        )
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        kwargs.update(tls_context=context, require_starttls=True)
    controller = Controller(Sink(args.dir), hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    print("listening %d" % port, flush=True)
    try:
        asyncio.run(asyncio.Event().wait())
    finally:
        controller.stop()


if __name__ == "__main__":
    sys.exit(main())
