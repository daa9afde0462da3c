import CircleTestSupport
import Foundation
import Logging
import Testing

@testable import CircleServer

/// What an app that embeds `CircleServer` gets: its data directory locked for the server's life,
/// a data directory that cannot be used named in the error, and settings out of range refused
/// before anything is opened.
@Suite("CircleServer: the data directory and settings")
struct DataDirectoryLockTests {
    private static var logger: Logger {
        var logger = Logger(label: "circle.test.lock")
        logger.logLevel = .warning
        return logger
    }

    private static func temporaryDirectory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("circle-lock-\(UUID().uuidString)").path
    }

    @Test("a second server on the directory is refused with this process as the holder, until the first stops")
    func secondServerRefused() async throws {
        let data = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: data) }
        let configuration = CircleServerConfiguration(port: 0, dataDirectory: data, tokenKeys: .hs256(secret: testSecret))
        let first = try await CircleServer.start(configuration: configuration, logger: Self.logger)
        do {
            _ = try await CircleServer(configuration: configuration, logger: Self.logger)
            Issue.record("a second server opened the data directory of a running one")
        } catch let error as DataDirectoryError {
            #expect(error.code == .inUse)
            #expect(error.holder?.pid == getpid())
            #expect(error.culprit == data + "/circle.lock")
            #expect("\(error)".contains("is in use by process \(getpid())"), "\(error)")
        }
        await first.shutdown()
        // Stopped: the lock is released and the file names no one.
        #expect(try String(contentsOfFile: data + "/circle.lock", encoding: .utf8).isEmpty)
        let second = try await CircleServer.start(configuration: configuration, logger: Self.logger)
        await second.shutdown()
    }

    @Test("a server that was made but never run releases the lock when it goes away")
    func releasedOnDeinit() async throws {
        let data = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: data) }
        let configuration = CircleServerConfiguration(port: 0, dataDirectory: data, tokenKeys: .hs256(secret: testSecret))
        var server: CircleServer? = try await CircleServer(configuration: configuration, logger: Self.logger)
        #expect(server != nil)
        // The store is closed by the server's run; here it was never run, so close it as a test.
        try await server?.services.store.close()
        server = nil
        let again = try await CircleServer.start(configuration: configuration, logger: Self.logger)
        await again.shutdown()
    }

    @Test("a port outside 0…65535 is an error, not a truncated port", arguments: [99_999, 70_000, 65_536, -1])
    func portOutOfRange(_ port: Int) async throws {
        let configuration = CircleServerConfiguration(port: port, dataDirectory: Self.temporaryDirectory(), tokenKeys: .hs256(secret: testSecret))
        #expect(throws: CircleServerConfiguration.InvalidSetting.self) { try configuration.validate() }
        do {
            _ = try await CircleServer(configuration: configuration, logger: Self.logger)
            Issue.record("a server was made with port \(port)")
        } catch let error as CircleServerConfiguration.InvalidSetting {
            #expect(error.setting == "port")
            #expect("\(error)" == "CircleServerConfiguration.port must be from 0 to 65,535, not \(port)")
        }
        // Nothing was created: the check comes first.
        #expect(!FileManager.default.fileExists(atPath: configuration.dataDirectory))
    }

    @Test("limits that would stop the process in SwiftNIO are refused")
    func limitsOutOfRange() throws {
        var configuration = CircleServerConfiguration(tokenKeys: .hs256(secret: testSecret))
        configuration.limits.outboundQueueBytes = -1
        #expect(throws: CircleServerConfiguration.InvalidSetting.self) { try configuration.validate() }
        configuration.limits.outboundQueueBytes = 1 << 20
        configuration.limits.maxMessageBytes = 5_000_000_000
        #expect(throws: CircleServerConfiguration.InvalidSetting.self) { try configuration.validate() }
        configuration.limits.maxMessageBytes = 64 * 1024
        configuration.limits.postsPerSecond = .nan
        #expect(throws: CircleServerConfiguration.InvalidSetting.self) { try configuration.validate() }
        configuration.limits.postsPerSecond = 20
        try configuration.validate()
    }

    @Test("a data directory that cannot be made names the path that is at fault")
    func unusableDirectory() throws {
        let root = Self.temporaryDirectory()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        _ = FileManager.default.createFile(atPath: root + "/file", contents: Data("x".utf8))
        let cases: [(path: String, code: DataDirectoryError.Code, culprit: String)] = [
            (root + "/missing/data", .parentMissing, root + "/missing"),
            (root + "/file", .notADirectory, root + "/file"),
            (root + "/file/data", .notADirectory, root + "/file"),
            (root + "/file/deeper/data", .notADirectory, root + "/file"),
        ]
        for (path, code, culprit) in cases {
            let result = Result<Void, DataDirectoryError> { () throws(DataDirectoryError) in try DataDirectory.prepare(path) }
            guard case .failure(let error) = result else {
                Issue.record("\(path) was taken as a data directory")
                continue
            }
            #expect(error.code == code, "\(path): \(error)")
            #expect(error.culprit == culprit, "\(path): \(error)")
            #expect("\(error)".contains(path), "\(error)")
        }
        // The usual case: made with mode 0700, and a second call finds it.
        try DataDirectory.prepare(root + "/data")
        try DataDirectory.prepare(root + "/data/")
        let mode = try FileManager.default.attributesOfItem(atPath: root + "/data")[.posixPermissions] as? Int
        #expect(mode == 0o700)
        #expect(DataDirectory.parent(of: "data") == ".")
        #expect(DataDirectory.parent(of: "/data") == "/")
        #expect(DataDirectory.parent(of: "/a/b/") == "/a")
    }
}
