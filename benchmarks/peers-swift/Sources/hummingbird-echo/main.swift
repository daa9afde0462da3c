// WebSocket echo server on Hummingbird 2 + HummingbirdWebSocket: every message comes back as it
// came (binary as binary, text as text). Any path upgrades.
//
//     hummingbird-echo PORT
import Hummingbird
import HummingbirdWebSocket
import Logging

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 9201 : 9201
var logger = Logger(label: "hummingbird-echo")
logger.logLevel = .warning

let router = Router(context: BasicWebSocketRequestContext.self)
router.ws("/") { inbound, outbound, _ in
    for try await message in inbound.messages(maxSize: 16 << 20) {
        switch message {
        case .binary(let buffer): try await outbound.write(.binary(buffer))
        case .text(let text): try await outbound.write(.text(text))
        }
    }
}

let app = Application(
    router: Router(),
    server: .http1WebSocketUpgrade(webSocketRouter: router, configuration: .init(ws: .init(maxFrameSize: 16 << 20))),
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    logger: logger
)
print("hummingbird echo listening on 127.0.0.1:\(port)")
try await app.runService()
