"""A git smart-HTTP server over TLS for the integration tests: `git http-backend` (the CGI
program that ships with git) behind Python's standard-library HTTP server, on loopback.

Every request must carry `Authorization: Basic <base64 of CREDENTIALS>`; others get a 401 with a Basic
challenge, as GitHub and GitLab answer. Each request is logged (method, path, whether it was
authorized) to the log file, one JSON object per line.

Usage: server.py ROOT CERT KEY CREDENTIALS(user:secret) PORT_FILE LOG_FILE
"""

import base64
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.parse

ROOT, CERT, KEY, CREDENTIALS, PORT_FILE, LOG_FILE = sys.argv[1:7]
EXPECTED = "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()
LOCK = threading.Lock()


def log(entry):
    with LOCK, open(LOG_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_git(self):
        url = urllib.parse.urlsplit(self.path)
        authorized = self.headers.get("Authorization") == EXPECTED
        log({"method": self.command, "path": url.path, "query": url.query,
             "authorized": authorized})
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if not authorized:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": ROOT,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": urllib.parse.unquote(url.path),
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": "test",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["HTTP_GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             capture_output=True, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name.strip(), value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = handle_git
    do_POST = handle_git


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CERT, KEY)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(PORT_FILE + ".partial", "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    os.rename(PORT_FILE + ".partial", PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
