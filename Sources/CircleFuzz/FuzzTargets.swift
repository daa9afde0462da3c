import CircleServer
import CircleSocket
import CircleWire
import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOWebSocket

/// The fuzz targets: each takes arbitrary bytes and must neither trap nor leak, whatever they are.
/// `CIRCLE_FUZZ_TARGET` picks one (scripts/fuzz runs each in turn).
enum FuzzTarget: String, CaseIterable {
    /// A `circle.v1` request frame's text: the strict JSON parser and the envelope checks.
    case request
    /// Bytes from a WebSocket peer: CircleSocket's frame reader, checked against NIO's frame
    /// decoder (the same frames and the same error, or the run traps), then the connection's
    /// protocol state (control frames, fragments, UTF-8, close codes), as a server. The first
    /// byte sets the size of the reads the frame reader gets (1–256 bytes), so frames are also
    /// cut at every point.
    case frame
    /// A permessage-deflate message: the inflater with its size bound (a deflate bomb must stop
    /// at the limit), split into two fragments at a point the input chooses.
    case deflate
    /// Bytes from an HTTP client: NIO's request decoder, then everything the server derives
    /// from each head.
    case http
    /// A client's byte stream through a real server's connection on loopback: HTTP/1.1, the
    /// routes, the WebSocket upgrade with whatever follows it in the same read, the sessions
    /// (``PipelineFuzzing``).
    case pipeline
    /// A passkey's bytes: the bounded CBOR decoder, COSE keys, authenticator data, attestation
    /// objects and both WebAuthn ceremonies (``WebAuthnFuzzing``).
    case webauthn
    /// What an identity provider and a token's bearer control: the bytes up to the first
    /// newline as a compact JWT (``UnverifiedJWT``: base64url, the header and payload JSON), the
    /// rest as a JWKS document (``JWKSDocument``: the limits, each key's checks and its
    /// conversion to a jwt-kit JWK). A parsed document must keep its promises: at most
    /// ``JWKSDocument/maxKeys`` keys, distinct kids, each with supported algorithms only.
    case jwks
    /// What a bot's endpoint answers (``WebhookReply``): the first byte picks the status and
    /// the `Content-Type`, the rest is the body. A reply must keep its promises: non-empty text
    /// within the limit, no control characters but tab and newline.
    case webhookReply = "webhook-reply"
    /// What a person types into a search box (``SearchQuery/parse(_:)``), as UTF-8 (invalid
    /// sequences replaced). A parsed query must keep its promises: something to find, no empty
    /// term, no control character in a term, at most ``SearchQuery/Limits/maxTerms`` terms and
    /// filters, the same query when parsed again.
    case searchQuery = "search-query"
    /// What a circle's publish hook answers (``PublishHookReply``): the first byte picks the
    /// status and the `Content-Type`, the rest is the body. A verdict must keep its promises: only
    /// from a `2xx`; a replacement non-empty within the limit with no control characters but
    /// tab and newline; a reason within ``PublishHook/maxReasonBytes`` with no control characters.
    case publishHookReply = "publish-hook-reply"
    /// A browser's push subscription as the subscribe route takes it
    /// (``PushSubscription/parse(_:user:policy:now:)``): the first byte picks the policy, the rest
    /// is the body. A subscription must keep its promises: an endpoint within the limit with a
    /// scheme the policy allows, a 65-byte uncompressed key, a 16-byte auth secret, and the same
    /// subscription when its JSON is parsed again.
    case pushSubscription = "push-subscription"
    /// A circle export's `circle.jsonl` (``CircleExportFormat/Reader``), split at newlines, each
    /// line read in turn until one is refused. A file it accepts must keep its promises: a header
    /// first, then exactly the members, media and entries it announces, entries with seqs 1, 2,
    /// 3, … whose changes and replies name earlier posts.
    case circleExport = "circle-export"
    /// A `circle serve --config` file (``SettingsFile/parse(_:)``): UTF-8, bounded size and
    /// depth, JSON with each member's line. A parsed file must keep its promises: keys unique,
    /// every line from 1 to the file's count of lines, the same result when parsed again.
    case settingsFile = "settings-file"
    /// What an app and APNs send the server about Apple devices: with the first byte even, the
    /// rest is a device registration (``APNsDevice/parse(_:)``), which must keep its promises (a
    /// lowercase hex token of 64 to 200 digits, an endpoint that names the same device again);
    /// odd, the rest is an APNs error reply (``APNsAttempt/reason(_:)``), whose reason is 1 to 64
    /// ASCII letters or none.
    case apns

    func run(_ bytes: [UInt8]) {
        switch self {
        case .request:
            _ = JSONParser.parse(bytes)
            _ = CircleRequest.decode(bytes)
        case .frame:
            Self.frames(bytes)
        case .deflate:
            Self.deflate(bytes)
        case .http:
            Self.http(bytes)
        case .pipeline:
            PipelineFuzzing.run(bytes)
        case .webauthn:
            WebAuthnFuzzing.run(bytes)
        case .jwks:
            Self.jwks(bytes)
        case .webhookReply:
            Self.webhookReply(bytes)
        case .searchQuery:
            Self.searchQuery(bytes)
        case .publishHookReply:
            Self.publishHookReply(bytes)
        case .pushSubscription:
            Self.pushSubscription(bytes)
        case .circleExport:
            Self.circleExport(bytes)
        case .settingsFile:
            Self.settingsFile(bytes)
        case .apns:
            Self.apns(bytes)
        }
    }

    private static func apns(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let body = Array(bytes.dropFirst())
        if first & 1 == 1 {
            guard let reason = APNsAttempt.reason(body) else { return }
            precondition((1...64).contains(reason.utf8.count) && reason.unicodeScalars.allSatisfy { $0.isASCII && $0.properties.isAlphabetic }, "a reason that is not 1 to 64 letters")
            return
        }
        guard case .success(let device) = APNsDevice.parse(body) else { return }
        precondition(APNsDevice.tokenHexLength.contains(device.token.utf8.count), "a token of the wrong length")
        precondition(device.token.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }, "a token that is not lowercase hex")
        precondition(APNsDevice(endpoint: device.endpoint) == device, "an endpoint that does not name its device again")
    }

    private static func settingsFile(_ bytes: [UInt8]) {
        let first: Result<SettingsFile, SettingsFile.Problem> = Result { () throws(SettingsFile.Problem) in try SettingsFile.parse(bytes[...]) }
        let again: Result<SettingsFile, SettingsFile.Problem> = Result { () throws(SettingsFile.Problem) in try SettingsFile.parse(bytes[...]) }
        guard first == again else { preconditionFailure("the same file parsed twice differently") }
        let lines = bytes.count { $0 == 0x0A } + 1
        switch first {
        case .failure(let problem):
            guard (0...lines).contains(problem.line), !problem.message.isEmpty else { preconditionFailure("a problem on line \(problem.line) of \(lines)") }
        case .success(let file):
            func check(_ entries: [SettingsFile.Entry]) {
                guard Set(entries.map(\.key)).count == entries.count else { preconditionFailure("a key twice") }
                for entry in entries {
                    guard (1...lines).contains(entry.line) else { preconditionFailure("an entry on line \(entry.line) of \(lines)") }
                    if case .object(let inner) = entry.value { check(inner) }
                }
            }
            check(file.entries)
        }
    }

    private static func circleExport(_ bytes: [UInt8]) {
        var reader = CircleExportFormat.Reader()
        var counts = (members: 0, media: 0, entries: Int64(0))
        var posts = Set<Int64>()
        do throws(CircleExportFormat.LineError) {
            for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
                switch try reader.read(line) {
                case .header:
                    precondition(reader.line == 1, "a header after line 1")
                case .member:
                    precondition(counts.media == 0 && counts.entries == 0, "a member after media or entries")
                    counts.members += 1
                case .media:
                    precondition(counts.entries == 0, "media after entries")
                    counts.media += 1
                case .entry(let entry):
                    counts.entries += 1
                    // Entries are numbered from the header's firstSeq; a post before it was removed
                    // by the circle's retention policy and may still be named.
                    let first = reader.header?.first ?? 1
                    precondition(entry.seq == first - 1 + counts.entries, "seq \(entry.seq) accepted as entry \(counts.entries) from \(first)")
                    if let target = entry.target { precondition(target < first || posts.contains(target), "a change of no earlier post") }
                    if let reply = entry.replyTo { precondition(reply < first || posts.contains(reply), "a reply to no earlier post") }
                    if entry.change == nil, entry.event == nil { posts.insert(entry.seq) }
                }
            }
            try reader.finish()
        } catch {
            precondition(error.line >= 1 && !error.reason.isEmpty, "an error without its line")
            return
        }
        let header = reader.header!
        precondition(counts.members == header.members && counts.media == header.media && counts.entries == header.entries, "counts differ from the header")
    }

    private static func searchQuery(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        func parsed() -> Result<SearchQuery, SearchQueryError> {
            do {
                return .success(try SearchQuery.parse(text))
            } catch {
                return .failure(error)
            }
        }
        let first = parsed()
        precondition(first == parsed(), "the same text parsed two ways")
        guard case .success(let query) = first else { return }
        precondition(!query.groups.isEmpty && query.groups.allSatisfy { !$0.isEmpty }, "nothing to find")
        let terms = query.terms + query.excluded
        precondition(terms.allSatisfy { !$0.text.isEmpty }, "an empty term")
        precondition(!terms.contains { $0.text.unicodeScalars.contains { $0.properties.generalCategory == .control } }, "a control character in a term")
        let filters = query.authors.count + query.circles.count + (query.before == nil ? 0 : 1) + (query.after == nil ? 0 : 1)
        precondition(terms.count + filters <= SearchQuery.Limits.maxTerms, "more terms than the limit")
        precondition(text.utf8.count <= SearchQuery.Limits.maxBytes, "a query over the byte limit parsed")
    }

    private static func pushSubscription(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let policy = PushSubscription.Policy(allowsHTTP: first & 1 != 0, allowsPrivate: first & 2 != 0)
        guard case .success(let parsed) = PushSubscription.parse(Array(bytes.dropFirst()), user: "u", policy: policy, now: 1) else { return }
        precondition(parsed.endpoint.utf8.count <= PushSubscription.maximumEndpointBytes, "an endpoint over the limit")
        let scheme = parsed.endpoint.prefix(8).lowercased()
        precondition(scheme.hasPrefix("https://") || (policy.allowsHTTP && scheme.hasPrefix("http://")), "an endpoint with a scheme the policy refuses")
        func decoded(_ text: String) -> [UInt8]? {
            var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            standard += String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
            return Data(base64Encoded: standard).map(Array.init)
        }
        precondition(decoded(parsed.p256dh)?.count == 65 && decoded(parsed.p256dh)?.first == 4, "a key that is not an uncompressed point")
        precondition(decoded(parsed.auth)?.count == 16, "an auth secret that is not 16 bytes")
        let again = #"{"endpoint":"# + String(decoding: (try? JSONEncoder().encode(parsed.endpoint)) ?? Data(), as: UTF8.self)
            + #","keys":{"p256dh":""# + parsed.p256dh + #"","auth":""# + parsed.auth + #""}}"#
        guard case .success(let reparsed) = PushSubscription.parse(Array(again.utf8), user: "u", policy: policy, now: 1) else {
            preconditionFailure("a parsed subscription that does not parse again")
        }
        precondition(reparsed == parsed, "a subscription that changes when parsed again")
    }

    private static func webhookReply(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let status = [200, 201, 204, 299, 301, 404, 500][Int(first & 0x07) % 7]
        let type = ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON ;x=y", "text/plain", nil][Int(first >> 3) % 5]
        let limit = 64
        guard case .success(let reply)? = WebhookReply.parse(status: status, contentType: type, body: Array(bytes.dropFirst()), maxTextBytes: limit) else { return }
        precondition((200..<300).contains(status), "a reply to a failed delivery")
        precondition(!reply.text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty && reply.text.utf8.count <= limit, "a reply's text out of bounds")
        precondition(!reply.text.unicodeScalars.contains { $0.properties.generalCategory == .control && $0 != "\n" && $0 != "\t" }, "control characters")
    }

    private static func publishHookReply(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let status = [200, 201, 204, 299, 301, 404, 500][Int(first & 0x07) % 7]
        let type = ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON ;x=y", "text/plain", nil][Int(first >> 3) % 5]
        let limit = 64
        guard case .success(let verdict) = PublishHookReply.parse(status: status, contentType: type, body: Array(bytes.dropFirst()), maxTextBytes: limit) else {
            return
        }
        precondition((200..<300).contains(status), "a verdict from a failed call")
        func hasControl(_ text: String, allowing: Set<Unicode.Scalar>) -> Bool {
            text.unicodeScalars.contains { $0.properties.generalCategory == .control && !allowing.contains($0) }
        }
        switch verdict {
        case .accept:
            break
        case .refuse(let reason):
            precondition(reason.utf8.count <= PublishHook.maxReasonBytes, "a reason over the limit")
            precondition(!hasControl(reason, allowing: []), "control characters in a reason")
        case .replace(let text):
            precondition(!text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty && text.utf8.count <= limit, "a replacement out of bounds")
            precondition(!hasControl(text, allowing: ["\n", "\t"]), "control characters in a replacement")
        }
    }

    private static func jwks(_ bytes: [UInt8]) {
        let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
        let token = String(decoding: bytes[..<newline], as: UTF8.self)
        if let parsed = UnverifiedJWT.parse(token) {
            guard case .object = parsed.claims else { preconditionFailure("claims that are not an object") }
        }
        let document = newline < bytes.endIndex ? bytes[(newline + 1)...] : bytes[...]
        for input in [document, bytes[...]] {
            guard case .success(let parsed) = JWKSDocument.parse(input) else { continue }
            precondition(parsed.keys.count <= JWKSDocument.maxKeys, "more keys than the limit")
            precondition(Set(parsed.keys.map(\.id)).count == parsed.keys.count, "a kid twice")
            for key in parsed.keys {
                precondition(!key.algorithms.isEmpty && key.algorithms.isSubset(of: JWKSDocument.supportedAlgorithms), "a key for \(key.algorithms)")
                precondition(!key.id.isEmpty && key.id.utf8.count <= JWKSDocument.maxKeyIDBytes, "a kid out of bounds")
            }
        }
    }

    private static func frames(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let input = ByteBuffer(bytes: bytes.dropFirst())
        let reference = Self.decode([input], with: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 16)))
        var reads: [ByteBuffer] = []
        var rest = input
        while rest.readableBytes > 0 {
            reads.append(rest.readSlice(length: min(Int(first) + 1, rest.readableBytes))!)
        }
        let frames = Self.decode(reads, with: WebSocketFrameReader(maxFrameSize: 1 << 16))
        precondition(
            frames.frames == reference.frames && frames.error == reference.error,
            "WebSocketFrameReader and NIO's WebSocketFrameDecoder disagree"
        )
        var state = WebSocketProtocolState(role: .server, maxMessageSize: 1 << 16, deflate: nil)
        for frame in frames.frames {
            if case .fail = state.receive(frame, allocator: ByteBufferAllocator()) { return }
        }
    }

    /// The frames `handler` passes on for `reads`, and the error it raised, if any.
    private static func decode(_ reads: [ByteBuffer], with handler: any ChannelHandler) -> (frames: [WebSocketFrame], error: NIOWebSocketError?) {
        let channel = EmbeddedChannel(handler: handler)
        defer { _ = try? channel.finish() }
        var error: NIOWebSocketError?
        for read in reads {
            do {
                try channel.writeInbound(read)
            } catch let failure {
                error = failure as? NIOWebSocketError
                break
            }
        }
        var frames: [WebSocketFrame] = []
        while let frame = try? channel.readInbound(as: WebSocketFrame.self) {
            frames.append(frame)
        }
        return (frames, error)
    }

    private static func deflate(_ bytes: [UInt8]) {
        guard let first = bytes.first,
            let deflate = try? PerMessageDeflate(parameters: .init(), isClient: false, compressionLevel: 6, minimumCompressedSize: 0)
        else { return }
        var state = WebSocketProtocolState(role: .server, maxMessageSize: 1 << 16, deflate: deflate)
        let payload = bytes.dropFirst()
        let split = payload.isEmpty ? 0 : Int(first) % (payload.count + 1)
        let allocator = ByteBufferAllocator()
        let parts = [payload.prefix(split), payload.dropFirst(split)]
        for (index, part) in parts.enumerated() {
            let frame = WebSocketFrame(
                fin: index == 1,
                rsv1: index == 0,
                opcode: index == 0 ? .text : .continuation,
                maskKey: nil,
                data: allocator.buffer(bytes: part)
            )
            if case .fail = state.receive(frame, allocator: allocator) { return }
        }
    }

    private static func http(_ bytes: [UInt8]) {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
        defer { _ = try? channel.finish() }
        guard (try? channel.writeInbound(ByteBuffer(bytes: bytes))) != nil else { return }
        while let part = try? channel.readInbound(as: HTTPServerRequestPart.self) {
            if case .head(let head) = part { _ = HTTPHeadInspection.inspect(head) }
        }
    }
}

#if FUZZING
// Built with `-sanitize=fuzzer`: libFuzzer provides `main` and calls this for every input.
private let selected: FuzzTarget = {
    let name = getenv("CIRCLE_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        fatalError("set CIRCLE_FUZZ_TARGET to one of \(FuzzTarget.allCases.map(\.rawValue))")
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = start.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
    selected.run(bytes)
    return 0
}
#else
/// Without the fuzzer: `circle-fuzz TARGET FILE…` runs the files through a target (to replay a
/// crash a fuzzing run found, or a corpus, under a debugger).
@main
struct ReplayInputs {
    static func main() throws {
        let arguments = CommandLine.arguments.dropFirst()
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name) else {
            print("usage: circle-fuzz \(FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")) FILE…")
            return
        }
        for path in arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else {
                print("cannot read \(path)")
                continue
            }
            target.run(Array(data))
            print("\(path): ok")
        }
    }
}
#endif
