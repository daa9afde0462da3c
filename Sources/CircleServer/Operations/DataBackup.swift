import CircleWire
import Crypto
import Foundation
import Logging
import NIOPosix
import SQLiteNIO

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A backup of a data directory on SQLite, and its restore (docs/OPERATIONS.md, "Backup and
/// restore"). A backup is a directory: `circle.sqlite` (a consistent copy of the database, made
/// by SQLite's `VACUUM INTO` while the server runs), `jwt-secret` when there is one, the photos
/// (`media/`), and `manifest.json` listing every file with its size and SHA-256.
///
/// The copy of the database is one read transaction: it sees every commit made before it began
/// and none after, and in WAL mode it never blocks the server's writer (a post waits at most
/// for SQLite's short lock on the WAL index, never for the copy). Photos are copied after the
/// database, so every photo a copied post refers to is there (photos are written before a post
/// can name them, and never changed).
///
/// Nothing is half-written: both directions write into a temporary directory beside the
/// destination and rename it into place only when everything is written and synced.
public enum DataBackup {
    /// What went wrong, as a sentence; ``kind`` says whose problem it is.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public enum Kind: Sendable {
            /// The destination exists and is not empty, or the source is not a Circle data directory.
            case refused
            /// A file could not be read or written (a full disk, permissions).
            case io
            /// The backup does not match its manifest, or its database is damaged.
            case corrupt
        }

        public var kind: Kind
        public var message: String
        public var description: String { self.message }

        init(_ kind: Kind, _ message: String) {
            self.kind = kind
            self.message = message
        }
    }

    /// The manifest's name in a backup.
    public static let manifestName = "manifest.json"
    static let databaseName = "circle.sqlite"
    static let secretName = "jwt-secret"
    static let mediaName = "media"

    /// `manifest.json`: what a backup holds.
    public struct Manifest: Codable, Sendable, Equatable {
        public struct File: Codable, Sendable, Equatable {
            /// Relative to the backup's directory, `/`-separated.
            public var path: String
            public var bytes: Int64
            /// Lower-case hex.
            public var sha256: String

            public init(path: String, bytes: Int64, sha256: String) {
                self.path = path
                self.bytes = bytes
                self.sha256 = sha256
            }
        }

        /// `circle-backup`.
        public var format: String
        /// 1.
        public var version: Int
        /// The Circle version that made it.
        public var circleVersion: String
        /// Milliseconds since 1970.
        public var createdAt: Int64
        /// The database's schema version (its `user_version`).
        public var schemaVersion: Int64
        public var files: [File]
    }

    /// What a backup or a restore did.
    public struct Summary: Sendable {
        public var manifest: Manifest
        public var totalBytes: Int64 { self.manifest.files.reduce(0) { $0 + $1.bytes } }
    }

    // MARK: - Backup

    /// Backs up the data directory `source` into `destination`, which must not exist or be an
    /// empty directory. Safe while `circle serve` runs on `source`.
    public static func backup(dataDirectory source: String, to destination: String, logger: Logger) async throws(Failure) -> Summary {
        let database = (source as NSString).appendingPathComponent(Self.databaseName)
        guard FileManager.default.fileExists(atPath: database) else {
            throw Failure(.refused, "\(source) holds no Circle database (\(database) does not exist)")
        }
        let staging = try Self.stage(destination)
        do {
            // 1. The database, as one consistent snapshot.
            let copy = (staging as NSString).appendingPathComponent(Self.databaseName)
            let schemaVersion = try await Self.snapshot(database, into: copy, logger: logger)
            var files = [try Self.describe(copy, as: Self.databaseName)]
            // 2. The token secret, if the server keeps one here.
            let secret = (source as NSString).appendingPathComponent(Self.secretName)
            if FileManager.default.fileExists(atPath: secret) {
                files.append(try Self.copyFile(secret, to: (staging as NSString).appendingPathComponent(Self.secretName), as: Self.secretName))
            }
            // 3. The photos (and uploads in progress), after the database.
            let media = (source as NSString).appendingPathComponent(Self.mediaName)
            for relative in try Self.regularFiles(under: media) {
                let path = Self.mediaName + "/" + relative
                files.append(try Self.copyFile((media as NSString).appendingPathComponent(relative), to: (staging as NSString).appendingPathComponent(path), as: path))
            }
            let manifest = Manifest(
                format: "circle-backup",
                version: 1,
                circleVersion: CircleVersion.current,
                createdAt: Int64(Date().timeIntervalSince1970 * 1000),
                schemaVersion: schemaVersion,
                files: files
            )
            try Self.writeManifest(manifest, in: staging)
            try Self.publish(staging, as: destination)
            return Summary(manifest: manifest)
        } catch {
            try? FileManager.default.removeItem(atPath: staging)
            throw error
        }
    }

    /// `VACUUM INTO` on a read-only connection of its own: the copy is compact and consistent.
    private static func snapshot(_ database: String, into copy: String, logger: Logger) async throws(Failure) -> Int64 {
        let connection: SQLiteConnection
        do {
            connection = try await SQLiteConnection.open(storage: .file(path: database), threadPool: .singleton, logger: logger, on: MultiThreadedEventLoopGroup.singleton.any())
        } catch {
            throw Failure(.io, "cannot open \(database): \(error)")
        }
        do {
            // The server's commits hold SQLite's locks only briefly: wait for them rather than fail.
            _ = try await connection.query("PRAGMA busy_timeout = 10000")
            let version = try await connection.query("PRAGMA user_version").first?.column("user_version")?.integer ?? 0
            _ = try await connection.query("VACUUM INTO ?", [.text(copy)])
            try? await connection.close()
            return Int64(version)
        } catch {
            try? await connection.close()
            let message = "\(error)"
            if message.contains("full") {  // SQLITE_FULL: "database or disk is full"
                throw Failure(.io, "cannot write the copy of the database to \(copy): the disk is full (\(message))")
            }
            throw Failure(.io, "cannot copy the database \(database) to \(copy): \(message)")
        }
    }

    // MARK: - Restore

    /// Checks the backup in `backup` against its manifest (every file's size and SHA-256, no
    /// file missing or extra) and the database's integrity, then restores it into the data
    /// directory `destination`, which must not exist or be an empty directory.
    public static func restore(backup: String, into destination: String, logger: Logger) async throws(Failure) -> Summary {
        let manifest = try Self.verify(backup)
        try await Self.checkIntegrity((backup as NSString).appendingPathComponent(Self.databaseName), logger: logger)
        let staging = try Self.stage(destination)
        do {
            for file in manifest.files {
                _ = try Self.copyFile((backup as NSString).appendingPathComponent(file.path), to: (staging as NSString).appendingPathComponent(file.path), as: file.path)
            }
            // The server makes `media/uploads` itself; nothing else is needed.
            try Self.publish(staging, as: destination)
            return Summary(manifest: manifest)
        } catch {
            try? FileManager.default.removeItem(atPath: staging)
            throw error
        }
    }

    /// The manifest of `backup`, once every file matches it.
    public static func verify(_ backup: String) throws(Failure) -> Manifest {
        let path = (backup as NSString).appendingPathComponent(Self.manifestName)
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Failure(.corrupt, "\(backup) is not a Circle backup: \(path) cannot be read")
        }
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: data)
        } catch {
            throw Failure(.corrupt, "\(path) is not a Circle backup manifest: \(error)")
        }
        guard manifest.format == "circle-backup" else { throw Failure(.corrupt, "\(path) is not a Circle backup manifest (format \"\(manifest.format)\")") }
        guard manifest.version == 1 else { throw Failure(.corrupt, "\(path) is a backup of format version \(manifest.version); this Circle reads version 1") }
        guard manifest.files.contains(where: { $0.path == Self.databaseName }) else { throw Failure(.corrupt, "\(path) lists no \(Self.databaseName)") }
        var listed = Set<String>()
        for file in manifest.files {
            // Only plain relative paths: a manifest cannot send a restore outside its destination.
            let parts = file.path.split(separator: "/", omittingEmptySubsequences: false)
            guard !file.path.isEmpty, !file.path.hasPrefix("/"), !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else {
                throw Failure(.corrupt, "\(path) lists a file outside the backup: \"\(file.path)\"")
            }
            guard listed.insert(file.path).inserted else { throw Failure(.corrupt, "\(path) lists \(file.path) twice") }
            let described = try Self.describe((backup as NSString).appendingPathComponent(file.path), as: file.path, missing: .corrupt)
            guard described.bytes == file.bytes, described.sha256 == file.sha256 else {
                throw Failure(.corrupt, "\(file.path) in \(backup) does not match the manifest (\(described.bytes) bytes, SHA-256 \(described.sha256); the manifest says \(file.bytes) bytes, \(file.sha256)): the backup is damaged")
            }
        }
        let present = Set(try Self.regularFiles(under: backup)).subtracting([Self.manifestName])
        if let extra = present.subtracting(listed).sorted().first {
            throw Failure(.corrupt, "\(backup) holds \(extra), which its manifest does not list")
        }
        return manifest
    }

    private static func checkIntegrity(_ database: String, logger: Logger) async throws(Failure) {
        let answers: [String]
        do {
            let connection = try await SQLiteConnection.open(storage: .file(path: database), threadPool: .singleton, logger: logger, on: MultiThreadedEventLoopGroup.singleton.any())
            do {
                _ = try await connection.query("PRAGMA query_only = 1")
                answers = try await connection.query("PRAGMA integrity_check").compactMap { $0.column("integrity_check")?.string }
                try? await connection.close()
            } catch {
                try? await connection.close()
                throw error
            }
        } catch {
            throw Failure(.corrupt, "the database in the backup cannot be read: \(error)")
        }
        guard answers == ["ok"] else {
            throw Failure(.corrupt, "the database in the backup is damaged: \(answers.prefix(3).joined(separator: "; "))")
        }
    }

    // MARK: - Files

    /// A new directory beside `destination` to write into; `destination` must not exist or be
    /// an empty directory.
    static func stage(_ destination: String) throws(Failure) -> String {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: destination, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw Failure(.refused, "\(destination) is a file; give the path of a new (or empty) directory") }
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: destination)) ?? []
            guard entries.isEmpty else { throw Failure(.refused, "\(destination) is not empty; give the path of a new (or empty) directory") }
        }
        let parent = (destination as NSString).deletingLastPathComponent
        let staging = (parent.isEmpty ? "." : parent) + "/." + (destination as NSString).lastPathComponent + ".partial-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        do {
            try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure(.io, "cannot create a directory beside \(destination): \(Self.reason(error))")
        }
        return staging
    }

    /// Renames the finished `staging` to `destination` (replacing an empty directory).
    static func publish(_ staging: String, as destination: String) throws(Failure) {
        Self.syncDirectory(staging)
        if FileManager.default.fileExists(atPath: destination) {
            // An empty directory (checked in `stage`): rename(2) replaces it.
            _ = rmdir(destination)
        }
        guard rename(staging, destination) == 0 else {
            throw Failure(.io, "cannot move the finished copy into \(destination): \(String(cString: strerror(errno)))")
        }
        Self.syncDirectory((destination as NSString).deletingLastPathComponent)
    }

    private static func writeManifest(_ manifest: Manifest, in directory: String) throws(Failure) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let path = (directory as NSString).appendingPathComponent(Self.manifestName)
        do {
            try Self.writeWhole(try encoder.encode(manifest) + Data("\n".utf8), to: path)
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(.io, "cannot write \(path): \(error)")
        }
    }

    /// Copies `source` to `target` (mode 0600, synced), creating its directories, and
    /// describes the copy as it was read.
    static func copyFile(_ source: String, to target: String, as name: String) throws(Failure) -> Manifest.File {
        let directory = (target as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure(.io, "cannot create \(directory): \(Self.reason(error))")
        }
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw Failure(.io, "cannot read \(source): \(String(cString: strerror(errno)))") }
        defer { close(input) }
        let output = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw Failure(.io, "cannot write \(target): \(String(cString: strerror(errno)))") }
        defer { close(output) }
        var hasher = SHA256()
        var bytes: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(.io, "cannot read \(source): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            let problem = buffer.withUnsafeBytes { raw -> Failure? in
                let chunk = UnsafeRawBufferPointer(rebasing: raw[0..<count])
                hasher.update(bufferPointer: chunk)
                return Self.writeAll(chunk, to: output, path: target)
            }
            if let problem { throw problem }
            bytes += Int64(count)
        }
        guard fsync(output) == 0 else {
            throw Failure(.io, "cannot write \(target): \(String(cString: strerror(errno)))\(errno == ENOSPC ? " (the disk is full)" : "")")
        }
        return Manifest.File(path: name, bytes: bytes, sha256: hexString(hasher.finalize()))
    }

    static func writeWhole(_ data: Data, to path: String) throws(Failure) {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure(.io, "cannot write \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        if let problem = data.withUnsafeBytes({ Self.writeAll($0, to: fd, path: path) }) { throw problem }
        guard fsync(fd) == 0 else { throw Failure(.io, "cannot write \(path): \(String(cString: strerror(errno)))") }
    }

    /// Writes all of `bytes` to `fd`; the failure, if any.
    private static func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: Int32, path: String) -> Failure? {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return Failure(.io, "cannot write \(path): \(String(cString: strerror(errno)))\(errno == ENOSPC ? " (the disk is full)" : "")")
            }
            offset += written
        }
        return nil
    }

    /// Size and SHA-256 of a file.
    static func describe(_ path: String, as name: String, missing: Failure.Kind = .io) throws(Failure) -> Manifest.File {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(missing, "cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var hasher = SHA256()
        var bytes: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(.io, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            bytes += Int64(count)
        }
        return Manifest.File(path: name, bytes: bytes, sha256: hexString(hasher.finalize()))
    }

    /// The regular files under `root`, relative and `/`-separated, sorted; none if it does not exist.
    static func regularFiles(under root: String) throws(Failure) -> [String] {
        guard FileManager.default.fileExists(atPath: root) else { return [] }
        guard let enumerator = FileManager.default.enumerator(atPath: root) else {
            throw Failure(.io, "cannot list \(root)")
        }
        var files: [String] = []
        while let relative = enumerator.nextObject() as? String {
            var info = stat()
            if lstat((root as NSString).appendingPathComponent(relative), &info) == 0, (info.st_mode & S_IFMT) == S_IFREG {
                files.append(relative)
            }
        }
        return files.sorted()
    }

    static func syncDirectory(_ path: String) {
        let fd = open(path.isEmpty ? "." : path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }

    static func reason(_ error: any Error) -> String {
        if let posix = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError {
            return String(cString: strerror(Int32(posix.code)))
        }
        return (error as NSError).localizedDescription
    }
}
