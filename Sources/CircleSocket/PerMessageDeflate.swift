import CompressNIO
import NIOCore

/// The permessage-deflate parameters both sides agreed on in the handshake (RFC 7692).
public struct PerMessageDeflateParameters: Sendable, Hashable, CustomStringConvertible {
    public var serverNoContextTakeover = false
    public var clientNoContextTakeover = false
    public var serverMaxWindowBits = 15
    public var clientMaxWindowBits = 15

    public init() {}

    /// The parameters as they appear in `Sec-WebSocket-Extensions`.
    public var description: String {
        var parts = ["permessage-deflate"]
        if self.serverNoContextTakeover { parts.append("server_no_context_takeover") }
        if self.clientNoContextTakeover { parts.append("client_no_context_takeover") }
        if self.serverMaxWindowBits != 15 { parts.append("server_max_window_bits=\(self.serverMaxWindowBits)") }
        if self.clientMaxWindowBits != 15 { parts.append("client_max_window_bits=\(self.clientMaxWindowBits)") }
        return parts.joined(separator: "; ")
    }
}

/// One extension from a `Sec-WebSocket-Extensions` header: a name and its parameters.
struct WebSocketExtensionOffer: Equatable {
    var name: String
    var parameters: [(name: String, value: String?)]

    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.name == rhs.name && lhs.parameters.elementsEqual(rhs.parameters, by: { $0 == $1 })
    }

    /// Parses header values such as `permessage-deflate; client_max_window_bits, x-foo`.
    static func parse(_ headerValues: [String]) -> [WebSocketExtensionOffer] {
        headerValues.flatMap { $0.split(separator: ",") }.compactMap { element in
            let pieces = element.split(separator: ";").map { $0.trimmingASCIISpaces() }
            guard let name = pieces.first, !name.isEmpty else { return nil }
            let parameters = pieces.dropFirst().filter { !$0.isEmpty }.map { piece -> (String, String?) in
                guard let equals = piece.firstIndex(of: "=") else { return (piece.lowercased(), nil) }
                var value = String(piece[piece.index(after: equals)...]).trimmingASCIISpaces()
                if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                    value = String(value.dropFirst().dropLast())
                }
                return (String(piece[..<equals]).trimmingASCIISpaces().lowercased(), value)
            }
            return WebSocketExtensionOffer(name: name.lowercased(), parameters: parameters)
        }
    }
}

extension StringProtocol {
    func trimmingASCIISpaces() -> String {
        let scalars = self.unicodeScalars.drop(while: { $0 == " " || $0 == "\t" })
        var trimmed = String(String.UnicodeScalarView(scalars))
        while let last = trimmed.last, last == " " || last == "\t" { trimmed.removeLast() }
        return trimmed
    }
}

package enum PerMessageDeflateNegotiation {
    static let extensionName = "permessage-deflate"

    /// The client's offer for `Sec-WebSocket-Extensions`.
    static func offer(_ configuration: PerMessageDeflateConfiguration) -> String {
        var parts = [extensionName]
        if configuration.serverNoContextTakeover { parts.append("server_no_context_takeover") }
        if configuration.clientNoContextTakeover { parts.append("client_no_context_takeover") }
        if let bits = configuration.serverMaxWindowBits { parts.append("server_max_window_bits=\(bits)") }
        if let bits = configuration.clientMaxWindowBits {
            parts.append("client_max_window_bits=\(bits)")
        } else {
            parts.append("client_max_window_bits")
        }
        return parts.joined(separator: "; ")
    }

    /// Validates the server's answer to the client's offer. Returns `nil` when the server
    /// declined compression, and throws when it answered with something the client did not offer.
    static func accept(
        responseHeaderValues: [String],
        offered configuration: PerMessageDeflateConfiguration?
    ) throws -> PerMessageDeflateParameters? {
        let extensions = WebSocketExtensionOffer.parse(responseHeaderValues)
        guard let chosen = extensions.first else { return nil }
        guard extensions.count == 1, chosen.name == extensionName, let configuration else {
            throw WebSocketError(
                .handshakeInvalid,
                "the server accepted extensions that were not offered: \(responseHeaderValues.joined(separator: ", "))"
            )
        }
        var result = PerMessageDeflateParameters()
        var seen = Set<String>()
        for (name, value) in chosen.parameters {
            guard seen.insert(name).inserted else {
                throw WebSocketError(.handshakeInvalid, "the server repeated the permessage-deflate parameter \(name)")
            }
            switch (name, value) {
            case ("server_no_context_takeover", nil):
                result.serverNoContextTakeover = true
            case ("client_no_context_takeover", nil):
                result.clientNoContextTakeover = true
            case ("server_max_window_bits", let value?):
                guard let bits = Int(value), (8...15).contains(bits) else {
                    throw WebSocketError(.handshakeInvalid, "invalid server_max_window_bits=\(value)")
                }
                result.serverMaxWindowBits = bits
            case ("client_max_window_bits", let value?):
                guard let bits = Int(value), (8...15).contains(bits),
                    bits <= (configuration.clientMaxWindowBits ?? 15)
                else {
                    throw WebSocketError(.handshakeInvalid, "invalid client_max_window_bits=\(value)")
                }
                result.clientMaxWindowBits = bits
            default:
                throw WebSocketError(
                    .handshakeInvalid,
                    "invalid permessage-deflate parameter \(name)\(value.map { "=\($0)" } ?? "")"
                )
            }
        }
        if configuration.clientNoContextTakeover { result.clientNoContextTakeover = true }
        return result
    }

    /// A server's choice among a client's offers: the first acceptable permessage-deflate offer.
    ///
    /// - Parameters:
    ///   - headerValues: the request's `Sec-WebSocket-Extensions` values.
    ///   - serverNoContextTakeover: whether the server resets its compressor after each message
    ///     (saves its memory per connection).
    /// - Returns: the agreed parameters, or `nil` to run without compression.
    package static func respond(
        toOffers headerValues: [String],
        serverNoContextTakeover: Bool = false
    ) -> PerMessageDeflateParameters? {
        offers: for offer in WebSocketExtensionOffer.parse(headerValues) where offer.name == extensionName {
            var result = PerMessageDeflateParameters()
            result.serverNoContextTakeover = serverNoContextTakeover
            var seen = Set<String>()
            for (name, value) in offer.parameters {
                guard seen.insert(name).inserted else { continue offers }
                switch (name, value) {
                case ("server_no_context_takeover", nil):
                    result.serverNoContextTakeover = true
                case ("client_no_context_takeover", nil):
                    result.clientNoContextTakeover = true
                case ("server_max_window_bits", let value?):
                    guard let bits = Int(value), (8...15).contains(bits) else { continue offers }
                    result.serverMaxWindowBits = bits
                case ("client_max_window_bits", nil):
                    break
                case ("client_max_window_bits", let value?):
                    guard let bits = Int(value), (8...15).contains(bits) else { continue offers }
                    result.clientMaxWindowBits = bits
                default:
                    continue offers
                }
            }
            return result
        }
        return nil
    }
}

/// Compression state of one connection for permessage-deflate. Lives on the channel's event loop.
package final class PerMessageDeflate {
    /// What a connection's compressed messages depend on when each is compressed on its own
    /// (`server_no_context_takeover` on the server): the same payload deflated once with these
    /// settings is valid for every connection that has them.
    package struct SharedCompression: Sendable, Hashable {
        package var windowBits: Int
        package var compressionLevel: Int
        /// Payloads smaller than this go uncompressed.
        package var minimumCompressedSize: Int

        package init(windowBits: Int, compressionLevel: Int, minimumCompressedSize: Int) {
            self.windowBits = windowBits
            self.compressionLevel = compressionLevel
            self.minimumCompressedSize = minimumCompressedSize
        }
    }

    /// Set when this side compresses every message independently; `nil` with context takeover
    /// (each message depends on the connection's earlier ones) or when it sends uncompressed.
    package let sharedCompression: SharedCompression?
    private let compressor: (any NIOCompressor)?
    private let decompressor: any NIODecompressor
    private let resetCompressor: Bool
    private let resetDecompressor: Bool
    private let minimumCompressedSize: Int
    private static let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

    /// - Parameters:
    ///   - parameters: what the handshake agreed.
    ///   - isClient: which side this is; it decides which parameters apply to which direction.
    package init(parameters: PerMessageDeflateParameters, isClient: Bool, compressionLevel: Int, minimumCompressedSize: Int) throws {
        let ownWindow = isClient ? parameters.clientMaxWindowBits : parameters.serverMaxWindowBits
        self.resetCompressor = isClient ? parameters.clientNoContextTakeover : parameters.serverNoContextTakeover
        self.resetDecompressor = isClient ? parameters.serverNoContextTakeover : parameters.clientNoContextTakeover
        self.minimumCompressedSize = minimumCompressedSize
        // zlib cannot deflate with a 256-byte window (it silently uses 512), which a peer that
        // asked for 8 bits could not inflate; with 8 bits this side sends uncompressed messages.
        let clampedLevel = min(max(compressionLevel, 1), 9)
        if ownWindow >= 9, let window = ZlibConfiguration.WindowSize(rawValue: Int32(ownWindow)) {
            let level = ZlibConfiguration.CompressionLevel(rawValue: Int32(clampedLevel))
            let compressor = CompressionAlgorithm.deflate(
                configuration: .init(windowSize: window, compressionLevel: level ?? .defaultCompressionLevel)
            ).compressor
            try compressor.startStream()
            self.compressor = compressor
            self.sharedCompression = self.resetCompressor
                ? SharedCompression(windowBits: ownWindow, compressionLevel: clampedLevel, minimumCompressedSize: minimumCompressedSize)
                : nil
        } else {
            self.compressor = nil
            self.sharedCompression = nil
        }
        // Inflating with the largest window accepts data made with any smaller one.
        self.decompressor = CompressionAlgorithm.deflate(configuration: .init(windowSize: .window128k)).decompressor
        try self.decompressor.startStream()
    }

    deinit {
        try? self.compressor?.finishStream()
        try? self.decompressor.finishStream()
    }

    /// Compresses one message's payload, or returns `nil` when it should go uncompressed.
    package func compress(_ payload: ByteBuffer, allocator: ByteBufferAllocator) throws -> ByteBuffer? {
        guard let compressor, payload.readableBytes >= self.minimumCompressedSize else { return nil }
        var input = payload
        var output = allocator.buffer(capacity: compressor.maxSize(from: input) + 16)
        while true {
            try compressor.streamDeflate(from: &input, to: &output, flush: .sync)
            // A full output buffer may hold back pending output: grow it and flush again.
            guard output.writableBytes == 0 || input.readableBytes > 0 else { break }
            output.reserveCapacity(minimumWritableBytes: max(1024, input.readableBytes))
        }
        if self.resetCompressor { try compressor.resetStream() }
        // RFC 7692 7.2.1: drop the 0x00 0x00 0xFF 0xFF that ends the sync flush.
        output.moveWriterIndex(to: output.writerIndex - 4)
        return output
    }

    /// Inflates part of a compressed message into `output`, failing once `output` would exceed `limit`.
    func inflate(_ chunk: ByteBuffer, into output: inout ByteBuffer, limit: Int) throws {
        var input = chunk
        try self.inflate(&input, into: &output, limit: limit)
    }

    /// Inflates the end of a compressed message (RFC 7692 7.2.2 appends the sync-flush tail).
    func finishMessage(into output: inout ByteBuffer, limit: Int) throws {
        var tail = ByteBuffer(bytes: Self.tail)
        try self.inflate(&tail, into: &output, limit: limit)
        if self.resetDecompressor { try self.decompressor.resetStream() }
    }

    private func inflate(_ input: inout ByteBuffer, into output: inout ByteBuffer, limit: Int) throws {
        guard input.readableBytes > 0 else { return }
        while true {
            let room = limit - output.readableBytes + 1
            if output.writableBytes == 0 || output.writableBytes < min(4096, room) {
                output.reserveCapacity(
                    minimumWritableBytes: min(max(4096, input.readableBytes * 4, output.readableBytes), room)
                )
            }
            do {
                try self.decompressor.streamInflate(from: &input, to: &output)
                if output.readableBytes > limit { throw PerMessageDeflateError.tooBig }
                return
            } catch let error as CompressNIOError where error == .bufferOverflow {
                if output.readableBytes > limit { throw PerMessageDeflateError.tooBig }
                continue
            } catch let error as CompressNIOError where error == .inputBufferOverflow {
                return
            } catch let error as CompressNIOError {
                throw PerMessageDeflateError.corrupt(error)
            }
        }
    }
}

enum PerMessageDeflateError: Error {
    case tooBig
    case corrupt(CompressNIOError)
}
