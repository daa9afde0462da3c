// WebSocket echo server on Vapor 4 (websocket-kit): every message comes back as it came (binary
// as binary, text as text). Any path upgrades.
//
//     vapor-echo PORT
import Vapor

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 9202 : 9202
var environment = Environment.production
environment.arguments = ["vapor-echo"]  // Vapor's own command parsing does not see our argv
let app = try await Application.make(environment)
app.logger.logLevel = .warning
app.http.server.configuration.hostname = "127.0.0.1"
app.http.server.configuration.port = port

// The synchronous upgrade handler runs on the connection's event loop, where websocket-kit wants
// its callbacks set.
let echo: @Sendable (Request, WebSocket) -> Void = { _, ws in
    ws.onBinary { ws, buffer in ws.send(buffer) }
    ws.onText { ws, text in ws.send(text) }
}
app.webSocket(maxFrameSize: .init(integerLiteral: 16 << 20), onUpgrade: echo)
app.webSocket(.catchall, maxFrameSize: .init(integerLiteral: 16 << 20), onUpgrade: echo)
print("vapor echo listening on 127.0.0.1:\(port)")
try await app.execute()
try await app.asyncShutdown()
