@testable import CircleServer
import CircleWire
import NIOCore
import Testing

/// The hub's pre-framed payload of a server message.
@Suite struct HubPayloadTests {
    @Test(
        "the hub's payload: the JSON, and the same bytes behind a frame header, as the copying path made them",
        arguments: [0, 100, 126, 200, 70_000]
    )
    func hubFrame(textLength: Int) {
        let message = CircleServerMessage.post(
            CirclePost(circle: "room", seq: 1, author: "ana", text: String(repeating: "x", count: textLength), attachment: nil, time: 1, id: "p")
        )
        let payload = HubPayload.framed(message, allocator: ByteBufferAllocator())
        let text = ByteBuffer(string: message.encodedJSON())
        #expect(payload.text == text)
        #expect(payload.framed == ServerFrame.text(text, compressed: false, allocator: ByteBufferAllocator()))
    }
}
