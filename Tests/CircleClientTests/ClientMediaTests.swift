import CircleClient
import CircleServer
import CircleTestSupport
import Crypto
import Foundation
import NIOConcurrencyHelpers
import Testing

private func mediaClient(
    _ server: TestServer,
    user: String,
    stateFile: String? = nil,
    port: Int? = nil,
    transfers: TransferConfiguration = .init()
) async throws -> CircleClient {
    try await CircleClient(
        configuration: .init(
            servers: ["ws://127.0.0.1:\(port ?? server.port)/v1/ws"],
            tokenProvider: { try await server.token(user) },
            reconnect: .init(base: .milliseconds(100), cap: .seconds(1)),
            postTimeout: .seconds(60),
            stateFile: stateFile,
            transfers: transfers
        )
    )
}

/// Writes `count` bytes starting with `magic` (then pseudo-random) to a temporary file.
private func photoFile(_ count: Int, magic: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0], seed: UInt64 = 1, name: String = "photo.jpg") throws -> (path: String, sha256: String) {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-photo-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let path = directory.appendingPathComponent(name).path
    var state = seed | 1
    var bytes = [UInt8](repeating: 0, count: min(count, 1 << 20))
    for index in bytes.indices {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        bytes[index] = UInt8(truncatingIfNeeded: state)
    }
    for (index, byte) in magic.enumerated() where index < bytes.count { bytes[index] = byte }
    // Larger files repeat the block, each copy stamped with its index so the content is not periodic.
    _ = FileManager.default.createFile(atPath: path, contents: nil)
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    var hasher = SHA256()
    var written = 0
    var block = 0
    while written < count {
        var chunk = bytes
        if block > 0 { chunk[magic.count] = UInt8(truncatingIfNeeded: block) }
        let slice = chunk[0..<min(chunk.count, count - written)]
        try handle.write(contentsOf: Data(slice))
        hasher.update(data: Array(slice))
        written += slice.count
        block += 1
    }
    try handle.close()
    return (path, hasher.finalize().map { String(format: "%02x", $0) }.joined())
}

private func sha256(ofFile path: String) throws -> String {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    return SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
}

private func metric(_ server: TestServer, _ name: String) async throws -> Double {
    let (status, text) = try await server.http("GET", "/metrics")
    #expect(status == 200)
    for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
        return Double(line.split(separator: " ")[1]) ?? 0
    }
    return 0
}

@Suite("CircleClient media transfers against a real server", .serialized)
struct ClientMediaTests {
    @Test("post(photo:) uploads and posts once; another member downloads it byte for byte, then from the cache")
    func photoPost() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("photos", owner: "pia", isPrivate: true)
        _ = try await server.http("POST", "/v1/circles/photos/members", token: try await server.token("pia"), json: #"{"user":"rob"}"#)
        let photo = try photoFile(300_000, magic: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], name: "shot.png")
        let cache = server.dataDirectory + "-cache"
        defer { try? FileManager.default.removeItem(atPath: cache) }

        let pia = try await mediaClient(server, user: "pia")
        await pia.connect()
        let events = pia.transferEvents()
        let seen = NIOLockedValueBox<[Int64]>([])
        let receipt = try await pia.post(photo: photo.path, caption: "harbour", to: "photos") { progress in
            seen.withLockedValue { $0.append(progress.completed) }
        }
        #expect(receipt.seq == 2)  // 1: the system entry "pia added rob"
        #expect(seen.withLockedValue { $0.last } == 300_000)
        #expect(seen.withLockedValue { $0 == $0.sorted() })
        var metrics: TransferMetrics?
        for await event in events {
            if case .finished(_, let finished) = event {
                metrics = finished
                break
            }
        }
        // Create the upload on a new connection, then PATCH the bytes over the kept-alive one.
        #expect(metrics?.requests.map(\.method) == ["POST", "PATCH"])
        #expect(metrics?.requests.first?.connect != nil)
        #expect(metrics?.requests.first?.reusedConnection == false)
        #expect(metrics?.requests.last?.reusedConnection == true)
        #expect(metrics?.requests.last?.timeToFirstByte != nil)
        #expect(metrics?.bytesSent == 300_000 + Int64(#"{"length":300000,"contentType":"image/png"}"#.utf8.count))
        #expect(metrics?.retries == 0)

        let page = try await pia.history(of: "photos", before: nil, limit: 10)
        #expect(page.posts.map(\.isSystem) == [true, false])
        #expect(page.posts.last?.text == "harbour")
        #expect(page.posts.last?.attachment == photo.sha256)

        let rob = try await mediaClient(server, user: "rob", transfers: .init(cacheDirectory: cache))
        let target = photo.path + ".copy"
        let first = try await rob.download(media: photo.sha256, to: target)
        #expect(try sha256(ofFile: target) == photo.sha256)
        #expect(first.size == 300_000)
        #expect(first.contentType == "image/png")
        #expect(first.metrics.fromCache == false)
        #expect(first.metrics.requests.map(\.status) == [200])
        #expect(first.metrics.bytesReceived == 300_000)

        let second = try await rob.download(media: photo.sha256)
        #expect(second.metrics.fromCache)
        #expect(second.metrics.requests.isEmpty)
        #expect(try sha256(ofFile: second.path) == photo.sha256)

        // A stale entry is revalidated with If-None-Match and answered 304.
        let entry = (cache as NSString).appendingPathComponent(photo.sha256 + ".json")
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: entry))) as! [String: Any]
        json["expires"] = 0
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: entry))
        let third = try await rob.download(media: photo.sha256)
        #expect(third.metrics.fromCache)
        #expect(third.metrics.requests.map(\.status) == [304])

        // Someone outside the private circle gets not_found.
        let eve = try await mediaClient(server, user: "eve")
        let refused = await #expect(throws: CircleClientError.self) { try await eve.download(media: photo.sha256) }
        #expect(refused?.code == .notFound)

        await pia.shutdown()
        await rob.shutdown()
        await eve.shutdown()
        await server.stop()
    }

    @Test("4-byte and 50 MiB files go up and come back byte for byte through the SDK", arguments: [4, 50 << 20])
    func uploadAndDownload(size: Int) async throws {
        let server = TestServer(limits: .init(maxMediaBytes: 64 << 20))
        defer { server.remove() }
        try await server.start()
        let file = try photoFile(size, magic: [0xFF, 0xD8, 0xFF, 0xE0], name: size == 4 ? "tiny.jpg" : "big.jpg")
        let client = try await mediaClient(server, user: "ann", transfers: .init(chunkSize: 1 << 20))
        let upload = try await client.upload(file: file.path)
        #expect(upload.mediaID == file.sha256)
        #expect(upload.size == Int64(size))
        let target = file.path + ".down"
        let download = try await client.download(media: upload.mediaID, to: target)
        #expect(download.size == Int64(size))
        #expect(try sha256(ofFile: target) == file.sha256)
        #expect(download.metrics.bytesReceived == Int64(size))
        await client.shutdown()
        await server.stop()
    }

    @Test("a download cancelled half-way resumes with Range and If-Range from the bytes on disk")
    func downloadResumes() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let file = try photoFile(4 << 20, seed: 9)
        let cache = server.dataDirectory + "-cache"
        defer { try? FileManager.default.removeItem(atPath: cache) }
        let client = try await mediaClient(server, user: "dan", transfers: .init(chunkSize: 64 << 10, cacheDirectory: cache))
        let id = try await client.upload(file: file.path).mediaID

        let running = NIOLockedValueBox<Task<DownloadResult, any Error>?>(nil)
        let task = Task {
            try await client.download(media: id) { progress in
                if progress.completed >= 1 << 20 { running.withLockedValue { $0?.cancel() } }
            }
        }
        running.withLockedValue { $0 = task }
        let cut = await #expect(throws: CircleClientError.self) { try await task.value }
        #expect(cut?.code == .stopped)
        let partial = (try FileManager.default.attributesOfItem(atPath: (cache as NSString).appendingPathComponent(id + ".part"))[.size] as? NSNumber)?.int64Value ?? 0
        #expect(partial >= 1 << 20)
        #expect(partial < 4 << 20)

        let resumed = try await client.download(media: id)
        #expect(resumed.metrics.resumedFrom == partial)
        #expect(resumed.metrics.requests.map(\.status) == [206])
        #expect(resumed.metrics.bytesReceived == (4 << 20) - partial)
        #expect(try sha256(ofFile: resumed.path) == file.sha256)
        await client.shutdown()
        await server.stop()
    }

    @Test("a download whose connection goes silent hits the request idle timeout, then resumes on a new connection")
    func idleTimeoutThenResume() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let proxy = try await StallingProxy(targetPort: server.port)
        let file = try photoFile(16 << 20, seed: 12)
        let client = try await mediaClient(
            server,
            user: "uma",
            transfers: .init(baseURL: "http://127.0.0.1:\(proxy.port)", requestTimeout: .milliseconds(500), chunkSize: 1 << 20)
        )
        let id = try await client.upload(file: file.path).mediaID
        // The download's connection (a new one: a fresh client) is cut off silently after 2 MiB.
        let reader = try await mediaClient(
            server,
            user: "uma",
            transfers: .init(baseURL: "http://127.0.0.1:\(proxy.port)", requestTimeout: .milliseconds(500))
        )
        proxy.stallNextConnection(afterBytes: 2 << 20)
        let target = file.path + ".down"
        let result = try await reader.download(media: id, to: target)
        #expect(try sha256(ofFile: target) == file.sha256)
        #expect(result.metrics.retries >= 1)
        #expect(result.metrics.requests.first?.error?.contains("no bytes") == true)
        #expect(result.metrics.requests.last?.status == 206)
        #expect(result.metrics.resumedFrom >= 1 << 20)
        #expect(result.metrics.requests.last?.reusedConnection == false)
        await client.shutdown()
        await reader.shutdown()
        await proxy.shutdown()
        await server.stop()
    }

    @Test("over TLS: transfers trust the configured CA, report the handshake, and refuse a key that matches no pin")
    func tls() async throws {
        let certificates = try TestCertificates()
        let server = TestServer()
        defer { server.remove() }
        server.configuration.tls = try certificates.serverTLS(names: ["localhost"])
        try await server.start()
        var socket = WebSocketConfiguration()
        socket.tls.trust = .certificateAuthorities([certificates.caCertificate])
        func client(_ socket: WebSocketConfiguration) async throws -> CircleClient {
            try await CircleClient(
                configuration: .init(servers: ["wss://localhost:\(server.port)/v1/ws"], tokenProvider: { try await server.token("tia") }, socket: socket)
            )
        }
        let trusting = try await client(socket)
        let file = try photoFile(100_000, seed: 21)
        let upload = try await trusting.upload(file: file.path)
        #expect(upload.mediaID == file.sha256)
        #expect(upload.metrics.requests.first?.tls != nil)
        #expect(upload.metrics.requests.last?.reusedConnection == true)
        let download = try await trusting.download(media: upload.mediaID, to: file.path + ".down")
        #expect(try sha256(ofFile: download.path) == file.sha256)

        socket.tls.pinnedPublicKeys = ["sha256/" + Data(repeating: 0, count: 32).base64EncodedString()]
        let pinned = try await client(socket)
        let refused = await #expect(throws: CircleClientError.self) { try await pinned.upload(file: file.path) }
        #expect(refused?.code == .tlsFailed)

        socket = WebSocketConfiguration()  // system roots: the test CA is unknown
        let untrusting = try await client(socket)
        let untrusted = await #expect(throws: CircleClientError.self) { try await untrusting.download(media: upload.mediaID) }
        #expect(untrusted?.code == .tlsFailed)
        for client in [trusting, pinned, untrusting] { await client.shutdown() }
        await server.stop()
    }

    @Test("a client restart in the middle of a photo post ends in exactly one post with the photo; the upload resumes")
    func restartMidPhotoPost() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("trip", owner: "kai")
        let stateFile = server.dataDirectory + "-client.sqlite"
        defer {
            removeStateFile(stateFile)
            try? FileManager.default.removeItem(atPath: stateFile + "-spool")
            try? FileManager.default.removeItem(atPath: stateFile + "-media")
        }
        let size = 4 << 20
        let file = try photoFile(size, seed: 4)

        // The first run uploads slowly and is shut down (the app is killed) after 512 KiB.
        let slow = TransferConfiguration(chunkSize: 64 << 10, maxUploadBytesPerSecond: 512 << 10)
        let first = try await mediaClient(server, user: "kai", stateFile: stateFile, transfers: slow)
        await first.connect()
        let halfway = NIOLockedValueBox(false)
        let posting = Task {
            try await first.post(photo: file.path, caption: "summit", to: "trip") { progress in
                if progress.completed >= 512 << 10 { halfway.withLockedValue { $0 = true } }
            }
        }
        while !halfway.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        await first.shutdown()
        let stopped = await #expect(throws: CircleClientError.self) { try await posting.value }
        #expect(stopped?.code == .stopped)
        // The caller's file may go away; the client kept its own copy.
        try FileManager.default.removeItem(atPath: file.path)
        let received = try await metric(server, "circle_media_received_bytes_total")
        #expect(received < Double(size))

        // The second run finds the job in the state file, resumes the upload, and posts.
        let second = try await mediaClient(server, user: "kai", stateFile: stateFile)
        #expect(await second.pendingPhotoPosts.count == 1)
        let events = second.transferEvents()
        let outbox = await second.outboxEvents()
        await second.connect()
        var metrics: TransferMetrics?
        for await event in events {
            if case .finished(_, let finished) = event {
                metrics = finished
                break
            }
        }
        #expect((metrics?.resumedFrom ?? 0) > 0)
        #expect((metrics?.resumedFrom ?? 0) < Int64(size))
        for await event in outbox {
            if case .sent = event { break }
        }
        let page = try await second.history(of: "trip", before: nil, limit: 10)
        #expect(page.posts.count == 1)
        #expect(page.posts.first?.text == "summit")
        #expect(page.posts.first?.attachment == file.sha256)
        // Every byte crossed the network once.
        #expect(try await metric(server, "circle_media_received_bytes_total") == Double(size))
        #expect(await second.pendingPhotoPosts.isEmpty)
        let download = try await second.download(media: file.sha256)
        #expect(try sha256(ofFile: download.path) == file.sha256)
        await second.shutdown()
        await server.stop()
    }

    @Test("an unreachable server: wait for connectivity within the deadline, or fail at once when told not to wait")
    func waitsForConnectivity() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let port = server.port
        await server.stop()
        let file = try photoFile(10_000)

        let impatient = try await mediaClient(server, user: "lea", port: port, transfers: .init(waitsForConnectivity: false))
        let refused = await #expect(throws: CircleClientError.self) { try await impatient.upload(file: file.path) }
        #expect(refused?.code == .notConnected)

        let brief = try await mediaClient(server, user: "lea", port: port, transfers: .init(connectivityTimeout: .milliseconds(300)))
        let gaveUp = await #expect(throws: CircleClientError.self) { try await brief.upload(file: file.path) }
        #expect(gaveUp?.code == .notConnected)

        // Waiting: the server comes back while the upload waits.
        let patient = try await mediaClient(server, user: "lea", port: port, transfers: .init(connectivityTimeout: .seconds(30)))
        let upload = Task { try await patient.upload(file: file.path) }
        try await Task.sleep(for: .milliseconds(300))
        try await server.start()
        let result = try await upload.value
        #expect(result.mediaID == file.sha256)
        #expect(result.metrics.retries > 0)
        #expect(result.metrics.requests.contains { $0.status == nil && $0.error != nil })
        await impatient.shutdown()
        await brief.shutdown()
        await patient.shutdown()
        await server.stop()
    }

    @Test("refusals surface as errors with the server's code: too_large, unsupported_media_type")
    func refusals() async throws {
        let server = TestServer(limits: .init(maxMediaBytes: 1000))
        defer { server.remove() }
        try await server.start()
        let client = try await mediaClient(server, user: "max")
        let big = try photoFile(2000)
        let tooLarge = await #expect(throws: CircleClientError.self) { try await client.upload(file: big.path) }
        #expect(tooLarge?.code == .tooLarge)
        let small = try photoFile(500)
        let wrongType = await #expect(throws: CircleClientError.self) { try await client.upload(file: small.path, contentType: "image/png") }
        #expect(wrongType?.code == .server(.unsupportedMediaType))
        await client.shutdown()
        await server.stop()
    }

    @Test("the download cache stays under its capacity, dropping the least recently used")
    func cacheCapacity() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let cache = server.dataDirectory + "-cache"
        defer { try? FileManager.default.removeItem(atPath: cache) }
        let client = try await mediaClient(server, user: "ivy", transfers: .init(cacheDirectory: cache, cacheCapacity: 100_000))
        let a = try photoFile(60_000, seed: 1)
        let b = try photoFile(60_000, seed: 2)
        let idA = try await client.upload(file: a.path).mediaID
        let idB = try await client.upload(file: b.path).mediaID
        _ = try await client.download(media: idA)
        _ = try await client.download(media: idB)
        let names = try FileManager.default.contentsOfDirectory(atPath: cache).filter { !$0.contains(".") }
        #expect(names == [idB])
        await client.shutdown()
        await server.stop()
    }
}
