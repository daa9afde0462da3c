"""Peer echo server on the Python `websockets` library (asyncio implementation).

Used by ../echo.py as a point of comparison for Circle's /v1/echo. Any path is accepted.

    python peers/websockets_echo.py --port 9101 [--uvloop]
"""
import argparse
import asyncio

from websockets.asyncio.server import serve


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main(port: int) -> None:
    # No compression (the load generator does not offer it), no size cap below 16 KiB messages.
    async with serve(echo, "127.0.0.1", port, compression=None, max_size=16 * 1024 * 1024,
                     ping_interval=None, max_queue=64):
        print(f"websockets echo listening on 127.0.0.1:{port}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop instead of asyncio's loop")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop
        uvloop.run(main(args.port))
    else:
        asyncio.run(main(args.port))
