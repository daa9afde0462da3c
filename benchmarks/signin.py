"""Password sign-in against a real `circle serve` at the default bcrypt cost (12): how long a
sign-in takes, and whether a wrong password for an existing name and an unknown name take the
same time (they must: nothing may tell which names exist).

Usage: python3 benchmarks/signin.py [PATH-TO-circle] [--rounds N]
Prints the median, minimum and maximum of each kind. Standard library only.
"""

import argparse
import json
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


def post(base, path, body):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    return status, time.monotonic() - start


def summary(label, times):
    ordered = sorted(times)
    print(f"{label:32} median {ordered[len(ordered) // 2] * 1000:6.0f} ms   min {ordered[0] * 1000:6.0f}   max {ordered[-1] * 1000:6.0f}   (n={len(times)})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", nargs="?", default=".build/debug/circle")
    parser.add_argument("--rounds", type=int, default=4, help="attempts of each kind (failures per name stay under the throttle's 5)")
    arguments = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as data:
        server = subprocess.Popen([arguments.binary, "serve", "--port", str(port), "--data", data + "/d"], stderr=subprocess.PIPE, text=True)
        try:
            token = None
            for line in server.stderr:
                match = re.search(r"#setup=([A-Za-z0-9_-]+)", line)
                if match:
                    token = match.group(1)
                    break
            base = f"http://127.0.0.1:{port}"
            status, _ = post(base, "/v1/auth/setup", {"token": token, "name": "ada", "password": "correct horse battery"})
            assert status == 201, status
            rounds = min(arguments.rounds, 4)
            wrong = [post(base, "/v1/auth/signin", {"name": "ada", "password": f"wrong password {i}"})[1] for i in range(rounds)]
            unknown = [post(base, "/v1/auth/signin", {"name": f"nobody{i}", "password": "wrong password"})[1] for i in range(rounds)]
            right = [post(base, "/v1/auth/signin", {"name": "ada", "password": "correct horse battery"})[1] for _ in range(rounds)]
            summary("wrong password, existing name", wrong)
            summary("unknown name", unknown)
            summary("right password (a session made)", right)
        finally:
            server.terminate()
            server.wait(20)


if __name__ == "__main__":
    main()
