import CircleHTTPClient
import CircleServer
import CircleSocket
import CircleTestSupport
import CircleWire
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// What an HTTP exchange answered.
struct HTTPAnswer {
    var status: Int
    var headers: HTTPHeaders
    var body: [UInt8]
    var text: String { String(decoding: self.body, as: UTF8.self) }
    func header(_ name: String) -> String? { self.headers.first(name: name) }
}

/// Media requests against a test server over ``HTTPConnection`` (one connection per exchange).
struct MediaHTTP {
    let server: TestServer

    func connect() async throws -> HTTPConnection {
        try await HTTPConnection.connect(to: .init(host: "127.0.0.1", port: self.server.port, usesTLS: false), timeout: .seconds(5)).0
    }

    /// One request; `body` is sent in chunks as given, then the whole answer is read.
    func exchange(
        _ method: HTTPMethod,
        _ uri: String,
        token: String?,
        headers: [(String, String)] = [],
        body chunks: [[UInt8]] = []
    ) async throws -> HTTPAnswer {
        let connection = try await self.connect()
        defer { connection.close() }
        var head = HTTPHeaders(headers)
        if let token { head.add(name: "Authorization", value: "Bearer \(token)") }
        let length = chunks.reduce(0) { $0 + $1.count }
        if !head.contains(name: "Content-Length") && (length > 0 || method == .POST || method == .PATCH) {
            head.add(name: "Content-Length", value: "\(length)")
        }
        do {
            try await connection.sendHead(method: method, uri: uri, headers: head)
            for chunk in chunks { try await connection.sendBody(ByteBuffer(bytes: chunk)) }
            try await connection.sendEnd()
        } catch {
            // The server may have answered early and closed; its answer is what counts.
            return try await Self.readAnswer(connection)
        }
        return try await Self.readAnswer(connection)
    }

    static func readAnswer(_ connection: HTTPConnection) async throws -> HTTPAnswer {
        var answer = HTTPAnswer(status: 0, headers: [:], body: [])
        while true {
            switch try await connection.next(idleTimeout: .seconds(20)) {
            case .head(let head):
                answer.status = Int(head.status.code)
                answer.headers = head.headers
            case .body(let buffer):
                answer.body += buffer.readableBytesView
            case .end:
                return answer
            }
        }
    }

    /// A metric's value from `/metrics` (0 when it is not there yet).
    func metric(_ name: String) async throws -> Double {
        let text = try await self.exchange(.GET, "/metrics", token: nil).text
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.split(separator: " ")[1]) ?? 0
        }
        return 0
    }
}

/// Test bytes that start like the image type they claim to be.
enum TestImage {
    static let pngMagic: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13]
    static let jpegMagic: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0]

    /// `count` bytes: the magic, then pseudo-random bytes from `seed`.
    static func bytes(_ count: Int, magic: [UInt8], seed: UInt64) -> [UInt8] {
        var state = seed | 1
        var bytes = [UInt8](repeating: 0, count: count)
        for index in 0..<count {
            if index < magic.count {
                bytes[index] = magic[index]
            } else {
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                bytes[index] = UInt8(truncatingIfNeeded: state)
            }
        }
        return bytes
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }
}

private struct MediaJSON: Decodable {
    var id: String
    var size: Int64
    var contentType: String
}

private struct UploadJSON: Decodable {
    var upload: String
    var offset: Int64
    var length: Int64
    var media: String?
}

@Suite("Media over HTTP on loopback", .serialized)
struct MediaServerTests {
    private func withServer(
        maxMediaBytes: Int64 = 25 * 1024 * 1024,
        _ body: (TestServer, MediaHTTP) async throws -> Void
    ) async throws {
        let server = TestServer(limits: .init(maxMediaBytes: maxMediaBytes))
        defer { server.remove() }
        try await server.start()
        do {
            try await body(server, MediaHTTP(server: server))
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    private func storedFiles(_ server: TestServer) -> [String] {
        let root = (server.dataDirectory as NSString).appendingPathComponent("media")
        let media = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let uploads = (try? FileManager.default.contentsOfDirectory(atPath: root + "/uploads")) ?? []
        return media.filter { $0 != "uploads" } + uploads.map { "uploads/" + $0 }
    }

    @Test("small files go up and come back byte for byte, stored once", arguments: [8, 1500])
    func smallRoundTrip(size: Int) async throws {
        try await self.withServer { server, http in
            let token = try await server.token("alice")
            let bytes = TestImage.bytes(size, magic: TestImage.pngMagic, seed: 7)
            let type = "image/png"
            let upload = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", type)], body: [bytes])
            #expect(upload.status == 201, "\(upload.text)")
            let media = try JSONDecoder().decode(MediaJSON.self, from: Data(upload.body))
            #expect(media.id == TestImage.sha256(bytes))
            #expect(media.size == Int64(size))
            #expect(media.contentType == type)
            #expect(upload.header("Location") == "/v1/media/\(media.id)")

            let again = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", type)], body: [bytes])
            #expect(again.status == 201)
            #expect(try JSONDecoder().decode(MediaJSON.self, from: Data(again.body)).id == media.id)
            #expect(self.storedFiles(server) == [media.id])

            let download = try await http.exchange(.GET, "/v1/media/\(media.id)", token: token)
            #expect(download.status == 200)
            #expect(download.body == bytes)
            #expect(download.header("Content-Length") == "\(size)")
            #expect(download.header("Content-Type") == type)
            #expect(download.header("ETag") == "\"\(media.id)\"")
            #expect(download.header("Cache-Control") == "private, max-age=31536000, immutable")
            #expect(download.header("Accept-Ranges") == "bytes")

            let head = try await http.exchange(.HEAD, "/v1/media/\(media.id)", token: token)
            #expect(head.status == 200)
            #expect(head.header("Content-Length") == "\(size)")
            #expect(head.body.isEmpty)
        }
    }

    @Test("a 50 MiB file is streamed up and down and arrives byte for byte")
    func fiftyMebibytes() async throws {
        try await self.withServer(maxMediaBytes: 64 * 1024 * 1024) { server, http in
            let token = try await server.token("alice")
            // 50 blocks of 1 MiB: one random block, each copy stamped with its index.
            let block = TestImage.bytes(1 << 20, magic: [], seed: 99)
            var hasher = SHA256()
            let connection = try await http.connect()
            defer { connection.close() }
            try await connection.sendHead(
                method: .POST,
                uri: "/v1/media",
                headers: ["Authorization": "Bearer \(token)", "Content-Type": "image/jpeg", "Content-Length": "\(50 << 20)"]
            )
            for index in 0..<50 {
                var chunk = ByteBuffer(bytes: block)
                chunk.setBytes(index == 0 ? TestImage.jpegMagic + [0] : [UInt8(index)], at: 0)
                hasher.update(data: chunk.readableBytesView)
                try await connection.sendBody(chunk)
            }
            try await connection.sendEnd()
            let upload = try await MediaHTTP.readAnswer(connection)
            #expect(upload.status == 201, "\(upload.text)")
            let expected = hasher.finalize().map { String(format: "%02x", $0) }.joined()
            let media = try JSONDecoder().decode(MediaJSON.self, from: Data(upload.body))
            #expect(media.id == expected)
            #expect(media.size == 50 << 20)

            // Download without collecting: compare block by block as the bytes arrive.
            let download = try await http.connect()
            defer { download.close() }
            try await download.sendHead(method: .GET, uri: "/v1/media/\(media.id)?token=\(token)", headers: [:])
            try await download.sendEnd()
            var received = 0
            var mismatches = 0
            var downloaded = SHA256()
            loop: while true {
                switch try await download.next(idleTimeout: .seconds(20)) {
                case .head(let head):
                    #expect(head.status == .ok)
                    #expect(head.headers.first(name: "Content-Length") == "\(50 << 20)")
                case .body(let buffer):
                    // Byte for byte against the block, skipping each copy's 5-byte stamp.
                    buffer.withUnsafeReadableBytes { bytes in
                        block.withUnsafeBytes { expected in
                            var index = 0
                            while index < bytes.count {
                                let position = (received + index) % (1 << 20)
                                let run = min(bytes.count - index, (1 << 20) - position)
                                let start = max(position, 5)
                                let end = position + run
                                if start < end, memcmp(bytes.baseAddress! + index + (start - position), expected.baseAddress! + start, end - start) != 0 {
                                    mismatches += 1
                                }
                                index += run
                            }
                        }
                    }
                    downloaded.update(data: buffer.readableBytesView)
                    received += buffer.readableBytes
                case .end:
                    break loop
                }
            }
            #expect(received == 50 << 20)
            #expect(mismatches == 0)
            #expect(downloaded.finalize().map { String(format: "%02x", $0) }.joined() == expected)
        }
    }

    @Test("an upload cut off half-way resumes at the server's offset; only the second half is sent again")
    func resumedUpload() async throws {
        try await self.withServer { server, http in
            let token = try await server.token("alice")
            let bytes = TestImage.bytes(2 << 20, magic: TestImage.jpegMagic, seed: 3)
            let half = bytes.count / 2
            let created = try await http.exchange(
                .POST,
                "/v1/media/uploads",
                token: token,
                body: [Array(#"{"length":\#(bytes.count),"contentType":"image/jpeg"}"#.utf8)]
            )
            #expect(created.status == 201, "\(created.text)")
            let upload = try JSONDecoder().decode(UploadJSON.self, from: Data(created.body))
            #expect(upload.offset == 0)

            // The whole body is announced, half of it is sent, then the connection drops.
            let cut = try await http.connect()
            try await cut.sendHead(
                method: .PATCH,
                uri: "/v1/media/uploads/\(upload.upload)",
                headers: ["Authorization": "Bearer \(token)", "Upload-Offset": "0", "Content-Length": "\(bytes.count)"]
            )
            try await cut.sendBody(ByteBuffer(bytes: bytes[0..<half]))
            // Wait until the server has the half on disk, then pull the plug.
            while try await http.metric("circle_media_received_bytes_total") < Double(half) {
                try await Task.sleep(for: .milliseconds(20))
            }
            cut.close()

            let status = try await http.exchange(.HEAD, "/v1/media/uploads/\(upload.upload)", token: token)
            #expect(status.status == 200)
            #expect(status.header("Upload-Offset") == "\(half)")
            #expect(status.header("Upload-Length") == "\(bytes.count)")

            let wrong = try await http.exchange(
                .PATCH,
                "/v1/media/uploads/\(upload.upload)",
                token: token,
                headers: [("Upload-Offset", "0")],
                body: [Array(bytes[0..<10])]
            )
            #expect(wrong.status == 409)
            #expect(wrong.header("Upload-Offset") == "\(half)")
            #expect(wrong.text.contains(#""code":"conflict""#))

            let rest = try await http.exchange(
                .PATCH,
                "/v1/media/uploads/\(upload.upload)",
                token: token,
                headers: [("Upload-Offset", "\(half)")],
                body: [Array(bytes[half...])]
            )
            #expect(rest.status == 201, "\(rest.text)")
            let media = try JSONDecoder().decode(MediaJSON.self, from: Data(rest.body))
            #expect(media.id == TestImage.sha256(bytes))
            // Each byte crossed the network once: the first half, then the second.
            #expect(try await http.metric("circle_media_received_bytes_total") == Double(bytes.count))

            // The answer to the last PATCH can be asked for again.
            let status2 = try await http.exchange(.GET, "/v1/media/uploads/\(upload.upload)", token: token)
            #expect(try JSONDecoder().decode(UploadJSON.self, from: Data(status2.body)).media == media.id)
            let repeated = try await http.exchange(
                .PATCH,
                "/v1/media/uploads/\(upload.upload)",
                token: token,
                headers: [("Upload-Offset", "\(bytes.count)")]
            )
            #expect(repeated.status == 201)

            let download = try await http.exchange(.GET, "/v1/media/\(media.id)", token: token)
            #expect(download.body == bytes)
            #expect(self.storedFiles(server) == [media.id])
        }
    }

    @Test("Range, If-Range, If-None-Match: 206, 200, 304 and 416; a cut download resumes with Range")
    func rangesAndValidators() async throws {
        try await self.withServer { server, http in
            let token = try await server.token("alice")
            let bytes = TestImage.bytes(300_000, magic: TestImage.pngMagic, seed: 11)
            let upload = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "image/png")], body: [bytes])
            let id = try JSONDecoder().decode(MediaJSON.self, from: Data(upload.body)).id
            let etag = "\"\(id)\""
            let path = "/v1/media/\(id)"

            let middle = try await http.exchange(.GET, path, token: token, headers: [("Range", "bytes=10-19")])
            #expect(middle.status == 206)
            #expect(middle.body == Array(bytes[10...19]))
            #expect(middle.header("Content-Range") == "bytes 10-19/300000")
            #expect(middle.header("Content-Length") == "10")

            let suffix = try await http.exchange(.GET, path, token: token, headers: [("Range", "bytes=-5")])
            #expect(suffix.status == 206)
            #expect(suffix.body == Array(bytes[(bytes.count - 5)...]))

            let stale = try await http.exchange(.GET, path, token: token, headers: [("Range", "bytes=10-19"), ("If-Range", "\"other\"")])
            #expect(stale.status == 200)
            #expect(stale.body == bytes)

            let unsatisfiable = try await http.exchange(.GET, path, token: token, headers: [("Range", "bytes=300000-")])
            #expect(unsatisfiable.status == 416)
            #expect(unsatisfiable.header("Content-Range") == "bytes */300000")
            #expect(unsatisfiable.text.contains(#""code":"range_not_satisfiable""#))

            let cached = try await http.exchange(.GET, path, token: token, headers: [("If-None-Match", etag)])
            #expect(cached.status == 304)
            #expect(cached.body.isEmpty)
            #expect(cached.header("ETag") == etag)

            // A download read half-way, then dropped, then resumed from where it stopped.
            let cut = try await http.connect()
            try await cut.sendHead(method: .GET, uri: path, headers: ["Authorization": "Bearer \(token)"])
            try await cut.sendEnd()
            var first: [UInt8] = []
            while first.count < 100_000 {
                switch try await cut.next(idleTimeout: .seconds(10)) {
                case .head(let head): #expect(head.status == .ok)
                case .body(let buffer): first += buffer.readableBytesView
                case .end: Issue.record("the whole file arrived before the cut")
                }
            }
            cut.close()
            let resumed = try await http.exchange(.GET, path, token: token, headers: [("Range", "bytes=\(first.count)-"), ("If-Range", etag)])
            #expect(resumed.status == 206)
            #expect(first + resumed.body == bytes)
        }
    }

    @Test("only the uploader and readers of a post with the media may fetch it; attachments must be one's own media")
    func accessRules() async throws {
        try await self.withServer { server, http in
            try await server.createCircle("team", owner: "alice", isPrivate: true)
            try await server.createCircle("town", owner: "carol")
            let alice = try await server.token("alice")
            let bob = try await server.token("bob")
            let bytes = TestImage.bytes(2000, magic: TestImage.jpegMagic, seed: 5)
            let upload = try await http.exchange(.POST, "/v1/media", token: alice, headers: [("Content-Type", "image/jpeg")], body: [bytes])
            let id = try JSONDecoder().decode(MediaJSON.self, from: Data(upload.body)).id
            let path = "/v1/media/\(id)"

            #expect(try await http.exchange(.GET, path, token: nil).status == 401)
            #expect(try await http.exchange(.GET, path, token: alice).status == 200)
            #expect(try await http.exchange(.GET, path + "?token=\(alice)", token: nil).status == 200)
            let refused = try await http.exchange(.GET, path, token: bob)
            #expect(refused.status == 404)
            #expect(refused.text.contains(#""code":"not_found""#))

            // Posted in the private circle: members other than alice may fetch it, bob still not.
            let client = try await TestClient.connect(server, user: "alice")
            #expect(try await client.request { .join("team", id: $0) }.ackSeq == 0)
            let posted = try await client.request { CircleRequest(action: .post, id: $0, circle: "team", text: "look", attachment: id) }
            #expect(posted.ackSeq == 1)
            #expect(try await http.exchange(.GET, path, token: bob).status == 404)
            _ = try await server.http("POST", "/v1/circles/team/members", token: alice, json: #"{"user":"bob"}"#)
            #expect(try await http.exchange(.GET, path, token: bob).body == bytes)

            // Bob cannot attach alice's media, nor an id that is no media.
            let bobClient = try await TestClient.connect(server, user: "bob")
            #expect(try await bobClient.request { .join("town", id: $0) }.ackSeq == 0)
            let stolen = try await bobClient.request { CircleRequest(action: .post, id: $0, circle: "town", attachment: id) }
            #expect(stolen.errorCode == .invalidAttachment)
            let made = try await bobClient.request { CircleRequest(action: .post, id: $0, circle: "town", text: "x", attachment: "m-123") }
            #expect(made.errorCode == .invalidAttachment)
            let text = try await bobClient.request { .post("still fine", to: "town", id: $0) }
            #expect(text.ackSeq == 1)
            await client.close()
            await bobClient.close()
        }
    }

    @Test("an oversized upload gets 413 and nothing is stored")
    func oversizedUpload() async throws {
        try await self.withServer(maxMediaBytes: 1 << 20) { server, http in
            let token = try await server.token("alice")
            let bytes = TestImage.bytes((1 << 20) + 1, magic: TestImage.jpegMagic, seed: 1)
            let refused = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "image/jpeg")], body: [bytes])
            #expect(refused.status == 413)
            #expect(refused.text.contains(#""code":"too_large""#))
            let create = try await http.exchange(
                .POST,
                "/v1/media/uploads",
                token: token,
                body: [Array(#"{"length":\#(bytes.count),"contentType":"image/jpeg"}"#.utf8)]
            )
            #expect(create.status == 413)
            #expect(self.storedFiles(server).isEmpty)
            #expect(try await http.exchange(.GET, "/v1/media/\(TestImage.sha256(bytes))", token: token).status == 404)
            #expect(try await http.metric("circle_media_received_bytes_total") == 0)
        }
    }

    @Test("Expect: 100-continue gets 100 Continue when the upload is accepted, the refusal when not")
    func expectContinue() async throws {
        try await self.withServer(maxMediaBytes: 1 << 20) { server, http in
            let token = try await server.token("alice")
            let bytes = TestImage.bytes(4000, magic: TestImage.jpegMagic, seed: 8)
            // A plain socket: the HTTP client in use drops interim answers.
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = UInt16(server.port).bigEndian
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            #expect(connected)
            var seconds = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
            func send(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
            func receive(until done: (String) -> Bool) -> String {
                var text = ""
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !done(text) {
                    let count = read(fd, &buffer, buffer.count)
                    if count <= 0 { break }
                    text += String(decoding: buffer[0..<count], as: UTF8.self)
                }
                return text
            }
            send(Array("POST /v1/media HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Type: image/jpeg\r\nContent-Length: 4000\r\nExpect: 100-continue\r\n\r\n".utf8))
            #expect(receive { $0.hasSuffix("\r\n\r\n") }.hasPrefix("HTTP/1.1 100 Continue\r\n"))
            send(bytes)
            #expect(receive { $0.hasSuffix("\"}") }.hasPrefix("HTTP/1.1 201 Created\r\n"))

            let refused = try await http.connect()
            defer { refused.close() }
            try await refused.sendHead(
                method: .POST,
                uri: "/v1/media",
                headers: ["Authorization": "Bearer \(token)", "Content-Type": "image/jpeg", "Content-Length": "\(2 << 20)", "Expect": "100-continue"]
            )
            // No body is sent: the answer comes without it.
            let answer = try await MediaHTTP.readAnswer(refused)
            #expect(answer.status == 413)
        }
    }

    @Test("unfinished uploads expire with their bytes; a user has a bounded number of them")
    func uploadExpiryAndCap() async throws {
        let server = TestServer(limits: .init(maxPendingUploadsPerUser: 2, uploadExpiry: .seconds(3)))
        // Long enough that the steps below finish before it on a loaded machine (400 ms did not).
        defer { server.remove() }
        try await server.start()
        let http = MediaHTTP(server: server)
        let token = try await server.token("alice")
        let create = Array(#"{"length":100,"contentType":"image/jpeg"}"#.utf8)
        var uploads: [String] = []
        for _ in 0..<2 {
            let created = try await http.exchange(.POST, "/v1/media/uploads", token: token, body: [create])
            #expect(created.status == 201)
            uploads.append(try JSONDecoder().decode(UploadJSON.self, from: Data(created.body)).upload)
        }
        let third = try await http.exchange(.POST, "/v1/media/uploads", token: token, body: [create])
        #expect(third.status == 429)
        #expect(third.text.contains(#""code":"rate_limited""#))
        let part = try await http.exchange(
            .PATCH,
            "/v1/media/uploads/\(uploads[0])",
            token: token,
            headers: [("Upload-Offset", "0")],
            body: [TestImage.jpegMagic + [1, 2, 3]]
        )
        #expect(part.status == 204)
        #expect(self.storedFiles(server) == ["uploads/\(uploads[0])"])
        // The sweep runs every quarter of the expiry; wait for it to take both.
        let deadline = ContinuousClock.now + .seconds(20)
        while try await http.exchange(.HEAD, "/v1/media/uploads/\(uploads[0])", token: token).status != 404, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(try await http.exchange(.HEAD, "/v1/media/uploads/\(uploads[0])", token: token).status == 404)
        #expect(self.storedFiles(server).isEmpty)
        #expect(try await http.exchange(.POST, "/v1/media/uploads", token: token, body: [create]).status == 201)
        await server.stop()
    }

    @Test("the bytes must be what the Content-Type says: 415 otherwise, and nothing stored")
    func contentTypeChecked() async throws {
        try await self.withServer { server, http in
            let token = try await server.token("alice")
            let jpeg = TestImage.bytes(5000, magic: TestImage.jpegMagic, seed: 2)
            let wrong = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "image/png")], body: [jpeg])
            #expect(wrong.status == 415)
            #expect(wrong.text.contains("the bytes are image/jpeg, not image/png"))
            let text = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "text/html")], body: [jpeg])
            #expect(text.status == 415)
            let empty = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "image/png")])
            #expect(empty.status == 415)
            // Not a photo at all: refused whatever the header says, as `circle upload --help` promises.
            let random = TestImage.bytes(4000, magic: [], seed: 9)
            let octets = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "application/octet-stream")], body: [random])
            #expect(octets.status == 415)
            #expect(octets.text.contains("is not one of image/jpeg, image/png, image/gif, image/webp"))
            let emptyOctets = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "application/octet-stream")])
            #expect(emptyOctets.status == 415)
            let tiny = try await http.exchange(.POST, "/v1/media", token: token, headers: [("Content-Type", "image/gif")], body: [Array("GIF89a".utf8)])
            #expect(tiny.status == 201)
            #expect(self.storedFiles(server) == [TestImage.sha256(Array("GIF89a".utf8))])
        }
    }
}
