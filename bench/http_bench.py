"""What the asyncio benchmarks share (amplification.py, hedge.py): a free port, a keep-alive
HTTP/1.1 upstream whose answers a benchmark scripts, and a reader of Content-Length answers.
Standard library only."""
import asyncio
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream:
    """Counts arrivals; `answer(head)` (a coroutine) returns the response bytes for a request."""

    def __init__(self, answer):
        self.arrivals = 0
        self.answer = answer

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.arrivals += 1
                writer.write(await self.answer(head))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def content_length(head):
    """The Content-Length of a message head (bytes up to the blank line), 0 without one."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


async def read_response(reader):
    """Reads one answer with a Content-Length body; returns its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    await reader.readexactly(content_length(head))
    return status
