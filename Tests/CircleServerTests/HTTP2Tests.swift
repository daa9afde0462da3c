import CircleServer
import CircleTestSupport
import Crypto
import Foundation
import NIOSSL
import Testing

/// HTTP/2 with a real HTTP/2 client: curl built with nghttp2 (`scripts/http2-client` installs it).
@Suite("HTTP/2 over TLS (ALPN h2), checked with curl --http2")
struct HTTP2Tests {
    @Test("API JSON and a media Range download come back over HTTP/2; HTTP/1.1 is still offered")
    func apiAndMediaOverHTTP2() async throws {
        let version = try await Self.curl(["-V"]).output
        try #require(version.contains("HTTP2"), "curl has no HTTP/2 support; run scripts/http2-client")
        let certificates = try TestCertificates()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-h2-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let ca = directory.appendingPathComponent("ca.pem").path
        try Self.pem(certificates.caCertificate).write(toFile: ca, atomically: true, encoding: .utf8)

        let server = TestServer()
        defer { server.remove() }
        server.configuration.tls = try certificates.serverTLS(names: ["localhost"])
        try await server.start()
        let base = "https://localhost:\(server.port)"
        let token = try await server.token("hana")
        let common = ["--cacert", ca, "-H", "Authorization: Bearer \(token)"]

        let health = try await Self.curl(["--http2", "--cacert", ca, base + "/healthz"])
        #expect(health.version == "2")
        #expect(health.status == 200)
        #expect(health.body.contains(#""status":"ok""#))

        let created = try await Self.curl(["--http2"] + common + ["-H", "Content-Type: application/json", "--data", #"{"name":"general"}"#, base + "/v1/circles"])
        #expect(created.version == "2")
        #expect(created.status == 201, "\(created.body)")
        let list = try await Self.curl(["--http2"] + common + [base + "/v1/circles"])
        #expect(list.version == "2")
        #expect(list.body.contains(#""name":"general""#), "\(list.body)")

        var bytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0]
        bytes += (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let file = directory.appendingPathComponent("photo.jpg")
        try Data(bytes).write(to: file)
        let uploaded = try await Self.curl(["--http2"] + common + ["-H", "Content-Type: image/jpeg", "--data-binary", "@" + file.path, base + "/v1/media"])
        #expect(uploaded.version == "2")
        #expect(uploaded.status == 201, "\(uploaded.body)")
        let id = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        #expect(uploaded.body.contains(id))

        let range = try await Self.curl(["--http2"] + common + ["-H", "Range: bytes=100-1099", "-D", directory.appendingPathComponent("headers").path, base + "/v1/media/\(id)"])
        #expect(range.version == "2")
        #expect(range.status == 206)
        #expect(Array(range.data) == Array(bytes[100...1099]))
        let headers = try String(contentsOfFile: directory.appendingPathComponent("headers").path, encoding: .utf8).lowercased()
        #expect(headers.contains("content-range: bytes 100-1099/\(bytes.count)"))

        let http1 = try await Self.curl(["--http1.1", "--cacert", ca, base + "/healthz"])
        #expect(http1.version == "1.1")
        #expect(http1.status == 200)
        await server.stop()
    }

    struct CurlResult {
        var status: Int
        var version: String
        var data: Data
        var output: String
        var body: String { String(decoding: self.data, as: UTF8.self) }
    }

    /// Runs curl without blocking a thread of the test's concurrency pool (its output goes to
    /// files; the exit is awaited); the status and HTTP version it reports come from `-w`.
    static func curl(_ arguments: [String]) async throws -> CurlResult {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("curl-\(UUID().uuidString)").path
        defer {
            try? FileManager.default.removeItem(atPath: base + ".out")
            try? FileManager.default.removeItem(atPath: base + ".body")
        }
        let isVersion = arguments == ["-V"]
        _ = FileManager.default.createFile(atPath: base + ".out", contents: nil)
        let output = try SpawnedProcess.open(base + ".out", forWriting: true)
        defer { close(output) }
        let input = try SpawnedProcess.open("/dev/null", forWriting: false)
        defer { close(input) }
        let process = try SpawnedProcess(
            executable: "/usr/bin/env",
            arguments: ["curl"] + (isVersion ? arguments : ["-s", "-m", "20", "-w", "%{http_code} %{http_version}\\n", "-o", base + ".body"] + arguments),
            standardInput: input, standardOutput: output, standardError: 2
        )
        // curl ends within its -m 20; the blocking wait runs on a thread of its own.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                process.waitUntilExit()
                continuation.resume()
            }
        }
        let text = (try? String(contentsOfFile: base + ".out", encoding: .utf8)) ?? ""
        guard !isVersion else { return CurlResult(status: 0, version: "", data: Data(), output: text) }
        let body = (try? Data(contentsOf: URL(fileURLWithPath: base + ".body"))) ?? Data()
        let fields = text.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        return CurlResult(status: Int(fields.first ?? "") ?? 0, version: fields.count > 1 ? fields[1] : "", data: body, output: text)
    }

    static func pem(_ certificate: NIOSSLCertificate) throws -> String {
        let der = Data(try certificate.toDERBytes()).base64EncodedString()
        var lines: [String] = []
        var index = der.startIndex
        while index < der.endIndex {
            let end = der.index(index, offsetBy: 64, limitedBy: der.endIndex) ?? der.endIndex
            lines.append(String(der[index..<end]))
            index = end
        }
        return "-----BEGIN CERTIFICATE-----\n" + lines.joined(separator: "\n") + "\n-----END CERTIFICATE-----\n"
    }
}
