import ArgumentParser
import CircleServer
import CircleSocket
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// `circle ws URL`: a terminal WebSocket client, like wscat.
struct WSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ws",
        abstract: "Talk to a WebSocket server from the terminal.",
        discussion: """
            Connects to URL, prints every message the server sends and sends every line typed on \
            standard input as a text message (without its newline). At the end of input (Ctrl-D, \
            or the end of a piped file) it closes the connection with 1000, after --wait seconds \
            if given, waits for the close handshake and exits. The first Ctrl-C closes the same \
            way; a second one exits at once.

            Output: received messages go to stdout, one per line. When stdout is a terminal they \
            are prefixed with "< "; otherwise they are printed as is, so a pipe gets exactly what \
            the server sent. Binary messages are shown as "[binary N bytes] DATA", DATA in hex or \
            base64 (--binary-format). Everything else (the "connected to" line, pong times, close \
            codes, errors) goes to stderr; --quiet leaves only errors there.

            With --execute and --wait, standard input is not read: the messages are sent, the \
            replies printed for --wait seconds, and the connection closed. With --execute alone \
            the session goes on reading standard input. --count N closes the connection as soon \
            as N messages have arrived (with --wait, after --wait seconds at the latest), so a \
            script need not guess how long replies take.

            Commands, typed on a line of their own:
            \(TerminalCommand.summary.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))

            Exit status (the same table as every circle command):
              0    closed normally: by this side, or by the server with 1000 (normal
                   closure), 1001 (going away) or a close frame without a code (1005)
              2    could not connect: refused, timed out, TLS or pin failure, or the
                   server refused the upgrade (its HTTP status and body are printed)
              3    the connection was lost, broke the protocol or a limit, a ping got
                   no pong, or the server closed with another code ("closed by
                   server: CODE REASON" is printed)
              4    the server refused the upgrade with 401 (the token)
              5    a --ca file that cannot be read
              64   usage error: invalid URL, unknown or invalid option, missing URL
              130  interrupted twice with Ctrl-C

            Examples (a local `circle serve`; /v1/echo needs `circle serve --echo`):
              T=$(circle token --user alice)
              circle ws ws://127.0.0.1:8080/v1/ws --subprotocol circle.v1 \\
                --header "Authorization: Bearer $T"
              circle ws wss://chat.example.com/v1/ws --subprotocol circle.v1 \\
                --header "Authorization: Bearer $TOKEN"
              circle ws ws://127.0.0.1:8080/v1/echo -x '{"hello":1}' --wait 2
              echo hello | circle ws ws://127.0.0.1:8080/v1/echo --wait 1
            """
    )

    @Argument(help: "The ws:// or wss:// URL to connect to.")
    var url: String

    @Option(
        name: .customLong("header"),
        help: ArgumentHelp("Add a header to the upgrade request (repeatable).", valueName: "NAME: VALUE")
    )
    var headers: [String] = []

    @Option(
        name: .customLong("subprotocol"),
        help: ArgumentHelp("Offer this subprotocol, most preferred first (repeatable).", valueName: "NAME")
    )
    var subprotocols: [String] = []

    @Option(
        name: .customLong("ca"),
        help: ArgumentHelp("Trust only the certificate authorities in this PEM file (wss://).", valueName: "FILE")
    )
    var caFile: String?

    @Flag(help: "Accept a self-signed certificate when the host is localhost or a loopback address (wss://).")
    var insecureLocalhost = false

    @Option(
        name: .customLong("pin"),
        help: ArgumentHelp(
            "Require the server's public key to match this SHA-256 SPKI pin: base64, optionally prefixed "
                + "sha256/, or hex (repeatable; wss://).",
            valueName: "SHA256"
        )
    )
    var pins: [String] = []

    @Flag(help: "Offer permessage-deflate compression.")
    var deflate = false

    @Option(
        help: ArgumentHelp(
            "Send a ping every SECONDS and print the round-trip time; no pong within 10 s drops the connection.",
            valueName: "SECONDS"
        )
    )
    var ping: Double?

    @Option(help: ArgumentHelp("How to print received binary messages.", valueName: "hex|base64"))
    var binaryFormat: TerminalOutput.BinaryFormat = .hex

    @Option(help: ArgumentHelp("Time allowed for TCP, TLS and the upgrade.", valueName: "SECONDS"))
    var connectTimeout: Double = 10

    @Option(help: ArgumentHelp("Largest message to accept; a larger one closes the connection with 1009.", valueName: "BYTES"))
    var maxMessageSize: Int?

    @Option(
        name: [.customShort("x"), .long],
        help: ArgumentHelp("Send this text message after connecting (repeatable).", valueName: "TEXT")
    )
    var execute: [String] = []

    @Option(
        help: ArgumentHelp(
            "Seconds to wait for replies before closing: after the --execute messages, or else at the end of input.",
            valueName: "SECONDS"
        )
    )
    var wait: Double?

    @Option(
        help: ArgumentHelp(
            "Close once this many messages have been received (with --wait: whichever comes first).",
            valueName: "N"
        )
    )
    var count: Int?

    @Flag(name: .shortAndLong, help: "Print only received messages (and errors).")
    var quiet = false

    @Flag(name: .shortAndLong, help: "Log the connection's events to stderr.")
    var verbose = false

    mutating func validate() throws {
        try OptionRanges.checkURLPort("URL", self.url)
        for header in self.headers {
            _ = try Self.parseHeader(header)
        }
        for subprotocol in self.subprotocols where !Self.isToken(subprotocol) {
            throw ValidationError("--subprotocol \"\(subprotocol)\" is not a valid subprotocol name (letters, digits and !#$%&'*+-.^_`|~)")
        }
        for pin in self.pins where !Self.isPin(pin) {
            throw ValidationError("--pin \"\(pin)\" is not a SHA-256 digest in base64 (optionally prefixed sha256/) or hex")
        }
        if self.caFile != nil && self.insecureLocalhost {
            throw ValidationError("--ca and --insecure-localhost exclude each other")
        }
        // An upper bound keeps the conversions to nanoseconds from overflowing.
        let day = 86_400.0
        if let ping { try OptionRanges.checkPositive("--ping", ping, atMost: day, unit: "seconds") }
        if let wait { try OptionRanges.check("--wait", wait, 0...day, unit: "seconds") }
        if let count { try OptionRanges.checkAtLeast("--count", count, 1) }
        try OptionRanges.checkPositive("--connect-timeout", self.connectTimeout, atMost: day, unit: "seconds")
        if let maxMessageSize { try OptionRanges.check("--max-message-size", maxMessageSize, OptionRanges.messageBytes, unit: "bytes") }
    }

    func run() async throws {
        let output = TerminalOutput(quiet: self.quiet, binaryFormat: self.binaryFormat)
        let configuration: WebSocketConfiguration
        do {
            configuration = try self.makeConfiguration()
        } catch let error as SetupError {
            output.error("\(error)")
            throw ExitCode(ExitStatus.local)
        } catch {
            output.error("\(error)")
            throw ExitCode(ExitStatus.usage)
        }
        var logger = Logger(label: "circle.ws", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = self.verbose ? .debug : .warning

        let socket: WebSocket
        do {
            socket = try await Self.connect(
                to: self.url,
                configuration: configuration,
                logger: logger,
                deadline: .seconds(self.connectTimeout) + .seconds(2)
            )
        } catch {
            let failure = CLIFailure.webSocketConnect(error, url: self.url, connectTimeout: self.connectTimeout)
            output.error(failure.message)
            throw ExitCode(failure.exitCode)
        }
        let interrupts = TerminalSession.Interrupts.trap()
        output.status(Self.connectedLine(url: self.url, socket: socket))
        if isatty(STDIN_FILENO) == 1 && (self.execute.isEmpty || self.wait == nil) {
            output.status("type messages, /help for commands, Ctrl-D to close")
        }

        let session = TerminalSession(
            socket: socket,
            output: output,
            options: TerminalSession.Options(
                execute: self.execute,
                wait: self.wait.map { .seconds($0) },
                count: self.count,
                pingInterval: self.ping.map { .seconds($0) }
            ),
            interrupts: interrupts
        )
        let status = await session.run()
        if status != ExitStatus.success {
            throw ExitCode(status)
        }
    }

    /// The connect took longer than the connect timeout plus a grace period.
    typealias ConnectDeadlineExceeded = WebSocketConnectDeadlineExceeded

    /// `WebSocket.connect`, but giving up at `deadline` even while a host name is being resolved.
    static func connect(
        to url: String,
        configuration: WebSocketConfiguration,
        logger: Logger,
        deadline: Duration
    ) async throws -> WebSocket {
        try await WebSocket.connect(to: url, configuration: configuration, logger: logger, deadline: deadline)
    }

    // MARK: Configuration

    /// A failure to set up the connection from the options (exit status 5: a local file).
    struct SetupError: Error, CustomStringConvertible {
        var description: String
    }

    func makeConfiguration() throws -> WebSocketConfiguration {
        var configuration = WebSocketConfiguration()
        for header in self.headers {
            let (name, value) = try Self.parseHeader(header)
            configuration.headers.add(name: name, value: value)
        }
        configuration.subprotocols = self.subprotocols
        configuration.connectTimeout = .nanoseconds(Int64(self.connectTimeout * 1_000_000_000))
        if let maxMessageSize { configuration.maxMessageSize = maxMessageSize }
        if self.deflate { configuration.compression = PerMessageDeflateConfiguration() }
        var tls = WebSocketTLSConfiguration()
        if let caFile {
            do {
                tls.trust = try .certificateAuthorities(pemFile: caFile)
            } catch {
                throw SetupError(description: "cannot read certificate authorities from \(caFile): \(error)")
            }
        }
        if self.insecureLocalhost { tls.trust = .selfSignedOnLocalhost }
        tls.pinnedPublicKeys = self.pins
        configuration.tls = tls
        return configuration
    }

    /// Splits `Name: value`; the name must be an HTTP token.
    static func parseHeader(_ text: String) throws -> (name: String, value: String) {
        guard let colon = text.firstIndex(of: ":") else {
            throw ValidationError("--header \"\(text)\" is not of the form \"Name: value\"")
        }
        let name = String(text[..<colon]).trimmingCharacters(in: .whitespaces)
        let value = String(text[text.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
        guard Self.isToken(name) else {
            throw ValidationError("--header \"\(text)\" has an invalid header name")
        }
        guard !value.contains(where: { $0 == "\r" || $0 == "\n" }) else {
            throw ValidationError("--header \"\(text)\" has a line break in its value")
        }
        return (name, value)
    }

    /// Whether `text` is an HTTP token (RFC 9110 section 5.6.2).
    static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.unicodeScalars.allSatisfy { scalar in
                scalar.isASCII
                    && (CharacterSet.alphanumerics.contains(scalar) || "!#$%&'*+-.^_`|~".unicodeScalars.contains(scalar))
            }
    }

    /// Whether `pin` is a SHA-256 digest as ``WebSocketTLSConfiguration/pinnedPublicKeys`` accepts it.
    static func isPin(_ pin: String) -> Bool {
        var text = pin.trimmingCharacters(in: .whitespaces)
        if text.lowercased().hasPrefix("sha256/") { text.removeFirst(7) }
        if text.count == 64, text.allSatisfy(\.isHexDigit) { return true }
        return Data(base64Encoded: text)?.count == 32
    }

    // MARK: Messages

    static func connectedLine(url: String, socket: WebSocket) -> String {
        var details: [String] = []
        if let subprotocol = socket.subprotocol { details.append("subprotocol: \(subprotocol)") }
        if let compression = socket.compression { details.append("compression: \(compression)") }
        return "connected to \(url)" + (details.isEmpty ? "" : " (\(details.joined(separator: ", ")))")
    }

    static func formatSeconds(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }
}

extension TerminalOutput.BinaryFormat: ExpressibleByArgument {}
