"""Peer echo server on picows (Cython WebSocket library for asyncio).

Used by ../echo.py as a point of comparison for Circle's /v1/echo. Any path is accepted.

    python peers/picows_echo.py --port 9102 [--uvloop]
"""
import argparse
import asyncio

from picows import WSListener, WSMsgType, WSTransport, WSFrame, ws_create_server


class Echo(WSListener):
    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        msg_type = frame.msg_type
        if msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()
            return
        if msg_type in (WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.CONTINUATION):
            # The benchmark sends unfragmented messages; echo each frame as it came.
            transport.send(msg_type, frame.get_payload_as_memoryview(), frame.fin)


async def main(port: int) -> None:
    server = await ws_create_server(lambda _request: Echo(), "127.0.0.1", port,
                                    max_frame_size=16 * 1024 * 1024)
    print(f"picows echo listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


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
