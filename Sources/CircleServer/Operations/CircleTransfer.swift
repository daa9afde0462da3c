import CircleWire
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Export and import of one circle (docs/OPERATIONS.md, "Export and import of a circle") in
/// ``CircleExportFormat``, through any ``CircleStore`` and the data directory's media.
///
/// An export reads the circle's entries a page at a time up to the `lastSeq` it found when it
/// began (entries committed meanwhile are left out), writes into a directory beside the
/// destination and renames it into place at the end. An import checks everything first — the
/// manifest's checksums, every line (``CircleExportFormat/Reader``), that the circle does not
/// exist and that every person it names has an account — and writes nothing when any check
/// fails; then it commits the entries again, in order, in bounded batches through
/// ``CircleStore/commit(_:)``, so each gets the `seq`, author, time and request id it had, and
/// the store derives reactions, mentions and the search index by its usual rules. An import
/// that stopped midway (a store error, the process killed) leaves the circle with its first
/// batches, each whole; the same import run again finds them and goes on after them.
public enum CircleTransfer {
    /// What went wrong, as a sentence; ``kind`` says whose problem it is.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public enum Kind: Sendable, Hashable {
            /// No such circle (export).
            case notFound
            /// The circle exists already on the target (import).
            case conflict
            /// The export is damaged or not in the format: a line, a checksum, a missing file.
            case corrupt
            /// The circle is a direct message (export), or people it names have no account on
            /// the target.
            case refused
            /// The destination is not empty, the data directory holds no database, or the
            /// PostgreSQL URL is not one.
            case local
            /// On SQLite, a server holds the data directory (import).
            case inUse
            /// A file could not be read or written, or the store failed.
            case io
        }

        public var kind: Kind
        public var message: String
        public var description: String { self.message }

        init(_ kind: Kind, _ message: String) {
            self.kind = kind
            self.message = message
        }
    }

    /// `manifest.json` of an export: every file with its size and SHA-256.
    public struct Manifest: Codable, Sendable, Equatable {
        /// `circle-export`.
        public var format: String
        /// 1.
        public var version: Int
        public var circle: String
        public var circleVersion: String
        /// Milliseconds since 1970.
        public var createdAt: Int64
        public var files: [DataBackup.Manifest.File]
    }

    /// What an export or an import did.
    public struct Summary: Sendable, Hashable {
        public var circle: String
        public var entries: Int64
        public var members: Int
        public var media: Int
        public var bytes: Int64
        /// Import: the `seq` of the last entry an earlier import of the same export had
        /// committed before it stopped (this one went on after it); `nil` when the circle was
        /// made anew.
        public var resumedAfter: Int64?
    }

    /// Entries read (export) or committed (import) at a time.
    public static let batchSize = 500

    // MARK: - Export

    /// Exports `circle` into `destination` (new, or an empty directory). `dataDirectory` holds
    /// the media files (`media/<id>`).
    public static func export(circle name: String, store: any CircleStore, dataDirectory: String, to destination: String) async throws(Failure) -> Summary {
        let circle: CircleInfo
        do {
            guard let found = try await store.circle(named: name) else { throw Failure(.notFound, CircleVisibility.Refusal.noSuchCircle(name).message) }
            circle = found
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(.io, "the store failed: \(error)")
        }
        guard circle.direct == nil else { throw Failure(.refused, "\(name) is a direct message; only circles are exported") }
        let staging: String
        do throws(DataBackup.Failure) { staging = try DataBackup.stage(destination) } catch { throw Self.failure(error) }
        do throws(Failure) {
            let summary = try await Self.write(circle, store: store, dataDirectory: dataDirectory, into: staging)
            do throws(DataBackup.Failure) { try DataBackup.publish(staging, as: destination) } catch { throw Self.failure(error) }
            return summary
        } catch {
            try? FileManager.default.removeItem(atPath: staging)
            throw error
        }
    }

    private static func write(_ circle: CircleInfo, store: any CircleStore, dataDirectory: String, into staging: String) async throws(Failure) -> Summary {
        let entriesPath = (staging as NSString).appendingPathComponent(".entries")
        let historyPath = (staging as NSString).appendingPathComponent(CircleExportFormat.historyName)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        func line(_ value: some Encodable) throws(Failure) -> Data {
            do { return try encoder.encode(value) + Data([0x0A]) } catch { throw Failure(.io, "cannot encode a line: \(error)") }
        }
        do {
            // 1. The entries, into a file of their own while the media they name are collected.
            let entries = try LineFile(creating: entriesPath)
            var mediaIDs: [String] = []
            var seenMedia = Set<String>()
            // The circle's retention policy may have removed its first entries: the export then
            // begins at the oldest kept one (or after the last, when none is kept).
            let first = try await store.posts(in: circle.name, after: 0, limit: 1).first.map { min($0.seq, circle.lastSeq + 1) } ?? circle.lastSeq + 1
            var after: Int64 = first - 1
            do {
                while after < circle.lastSeq {
                    let page = try await store.posts(in: circle.name, after: after, limit: Self.batchSize)
                    guard !page.isEmpty else { break }
                    for post in page where post.seq <= circle.lastSeq {
                        guard post.seq == after + 1 else { throw Failure(.io, "the store returned seq \(post.seq) after \(after)") }
                        if let attachment = post.attachment, post.change == nil, seenMedia.insert(attachment).inserted { mediaIDs.append(attachment) }
                        try entries.append(try line(CircleExportFormat.Entry(post)))
                        after = post.seq
                    }
                    if page.last.map({ $0.seq >= circle.lastSeq }) ?? true { break }
                }
                try entries.close()
            } catch {
                try? entries.close()
                throw error
            }
            // 2. Members (with their read markers and levels), the settings, the media.
            let readOnly = try await store.readOnlyCircles().contains(circle.name)
            var members: [CircleExportFormat.Member] = []
            for member in try await store.members(of: circle.name) {
                let view = try await store.circles(visibleTo: member, named: circle.name).first
                members.append(CircleExportFormat.Member(name: member, readSeq: min(view?.readSeq ?? 0, after), notify: view?.notify))
            }
            var media: [CircleExportFormat.Media] = []
            var files: [DataBackup.Manifest.File] = []
            let source = (dataDirectory as NSString).appendingPathComponent(CircleExportFormat.mediaName)
            for id in mediaIDs {
                guard let info = try await store.media(id: id) else { throw Failure(.io, "entry attachment \(id) is not stored media") }
                media.append(CircleExportFormat.Media(id: info.id, size: info.size, contentType: info.contentType, createdAt: info.createdAt))
                let path = CircleExportFormat.mediaName + "/" + id
                do throws(DataBackup.Failure) {
                    files.append(try DataBackup.copyFile((source as NSString).appendingPathComponent(id), to: (staging as NSString).appendingPathComponent(path), as: path))
                } catch {
                    throw Self.failure(error)
                }
            }
            // 3. circle.jsonl: the header, members, media, then the entries' file.
            let header = CircleExportFormat.Header(
                circle: circle.name, owner: circle.owner, private: circle.isPrivate, createdAt: circle.createdAt, readOnly: readOnly, members: members.count,
                media: media.count, entries: after - (first - 1), firstSeq: first == 1 ? nil : first, circleVersion: CircleVersion.current,
                exportedAt: Identity.now
            )
            let history = try LineFile(creating: historyPath)
            do {
                try history.append(try line(header))
                for member in members { try history.append(try line(member)) }
                for item in media { try history.append(try line(item)) }
                try history.copy(from: entriesPath)
                try history.close()
            } catch {
                try? history.close()
                throw error
            }
            _ = unlink(entriesPath)
            do throws(DataBackup.Failure) {
                files.insert(try DataBackup.describe(historyPath, as: CircleExportFormat.historyName), at: 0)
            } catch {
                throw Self.failure(error)
            }
            let manifest = Manifest(
                format: CircleExportFormat.formatName, version: CircleExportFormat.version, circle: circle.name, circleVersion: CircleVersion.current,
                createdAt: header.exportedAt, files: files
            )
            let manifestEncoder = JSONEncoder()
            manifestEncoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            do {
                try DataBackup.writeWhole(try manifestEncoder.encode(manifest), to: (staging as NSString).appendingPathComponent(CircleExportFormat.manifestName))
            } catch let error as DataBackup.Failure {
                throw Self.failure(error)
            }
            return Summary(circle: circle.name, entries: header.entries, members: members.count, media: media.count, bytes: files.reduce(0) { $0 + $1.bytes })
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(.io, "the store failed: \(error)")
        }
    }

    // MARK: - Import

    /// Checks the export in `directory` and, when every check passes, makes its circle in
    /// `store` and its media files in `dataDirectory`. Nothing is written when a check fails.
    ///
    /// A circle that exists is a conflict unless it is what an earlier import of this export
    /// left when it stopped: then the import goes on after the entries it finds.
    public static func importCircle(from directory: String, store: any CircleStore, dataDirectory: String) async throws(Failure) -> Summary {
        try await Self.importCircle(from: directory, store: store, dataDirectory: dataDirectory, batchSize: Self.batchSize) { _ in }
    }

    /// ``importCircle(from:store:dataDirectory:)`` with the batch size, and `committed` called
    /// after each batch with the entries the circle holds (tests stop an import there).
    static func importCircle(
        from directory: String,
        store: any CircleStore,
        dataDirectory: String,
        batchSize: Int,
        committed: (Int64) async throws -> Void
    ) async throws(Failure) -> Summary {
        // 1. The manifest: every file there, none extra, each with its size and checksum.
        let manifest = try Self.verify(directory)
        let historyPath = (directory as NSString).appendingPathComponent(CircleExportFormat.historyName)
        // 2. Every line, without writing anything.
        var reader = CircleExportFormat.Reader()
        do {
            try Self.lines(of: historyPath) { bytes throws(Failure) in
                do throws(CircleExportFormat.LineError) { _ = try reader.read(bytes) } catch { throw Failure(.corrupt, error.description) }
            }
            try reader.finish()
        } catch let failure as Failure {
            throw failure
        } catch let error as CircleExportFormat.LineError {
            throw Failure(.corrupt, error.description)
        } catch {
            throw Failure(.corrupt, "\(error)")
        }
        guard let header = reader.header else { throw Failure(.corrupt, "\(CircleExportFormat.historyName) is empty") }
        guard header.circle == manifest.circle else { throw Failure(.corrupt, "the manifest is of circle \(manifest.circle), the history of \(header.circle)") }
        let listed = Set(manifest.files.map(\.path))
        for id in reader.media.sorted() where !listed.contains(CircleExportFormat.mediaName + "/" + id) {
            throw Failure(.corrupt, "media \(id) is listed in \(CircleExportFormat.historyName) but its file is not in the manifest")
        }
        // 3. The target: no such circle yet (or one an earlier import of this export left when it
        // stopped), an account for everyone named.
        var resumeAfter: Int64?
        do {
            if let existing = try await store.circle(named: header.circle) {
                resumeAfter = try await Self.resumePoint(existing, header: header, historyPath: historyPath, store: store)
            }
            var missing: [String] = []
            for person in reader.people.sorted() {
                if try await store.account(named: person) == nil { missing.append(person) }
            }
            if !missing.isEmpty {
                let shown = missing.prefix(20).joined(separator: ", ") + (missing.count > 20 ? " and \(missing.count - 20) more" : "")
                throw Failure(.refused, "\(missing.count) people named in the export have no account here (\(shown)); create them first; nothing was imported")
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(.io, "the store failed: \(error)")
        }
        // 4. Write: the media files (content-addressed: one already there is the same bytes),
        // their rows, the circle, its members, the entries in order, the read markers.
        return try await Self.write(
            header, from: directory, historyPath: historyPath, store: store, dataDirectory: dataDirectory,
            resumeAfter: resumeAfter, batchSize: batchSize, committed: committed
        )
    }

    /// Whether `circle`, found on the target, is what an import of this export left when it
    /// stopped: the header's owner, privacy and creation time, and entries up to `seq` K whose
    /// `seq`, request id, author and time are the export's up to K (an import commits whole
    /// batches in order). Returns K; throws the conflict otherwise: when the circle went on since, or when
    /// the import had finished (every entry there, and every member's read marker, the last
    /// thing an import writes, at least where the export has it).
    private static func resumePoint(
        _ circle: CircleInfo, header: CircleExportFormat.Header, historyPath: String, store: any CircleStore
    ) async throws -> Int64 {
        let conflict = Failure(.conflict, "circle \"\(header.circle)\" exists on this server; nothing was imported")
        guard circle.direct == nil, circle.owner == header.owner, circle.isPrivate == header.private, circle.createdAt == header.createdAt,
            circle.lastSeq <= header.last
        else { throw conflict }
        var reader = CircleExportFormat.Reader()
        let handle = try LineReader(path: historyPath)
        defer { handle.close() }
        var page: [CirclePost] = []
        var index = 0
        var members: [CircleExportFormat.Member] = []
        while let line = try handle.next() {
            // Read and checked in full before: a line that does not read now is a changed file.
            let item = try reader.read(line)
            if case .member(let member) = item { members.append(member) }
            guard case .entry(let entry) = item else { continue }
            guard entry.seq <= circle.lastSeq else { break }
            if index == page.count {
                page = try await store.posts(in: circle.name, after: entry.seq - 1, limit: Self.batchSize)
                index = 0
            }
            guard index < page.count else { throw conflict }
            let post = page[index]
            index += 1
            guard post.seq == entry.seq, post.id == entry.id, post.author == entry.author, post.time == entry.time else { throw conflict }
        }
        if circle.lastSeq == header.last {
            var finished = true
            for member in members where member.readSeq > 0 {
                let marker = try await store.circles(visibleTo: member.name, named: circle.name).first?.readSeq ?? 0
                if marker < member.readSeq { finished = false }
            }
            if finished { throw conflict }
        }
        return circle.lastSeq
    }

    private static func write(
        _ header: CircleExportFormat.Header,
        from directory: String,
        historyPath: String,
        store: any CircleStore,
        dataDirectory: String,
        resumeAfter: Int64?,
        batchSize: Int,
        committed: (Int64) async throws -> Void
    ) async throws(Failure) -> Summary {
        let mediaDirectory = (dataDirectory as NSString).appendingPathComponent(CircleExportFormat.mediaName)
        var reader = CircleExportFormat.Reader()
        var members: [CircleExportFormat.Member] = []
        var media: [CircleExportFormat.Media] = []
        var batch: [NewPost] = []
        var uploaders: [String: String] = [:]
        var stored: Int64 = resumeAfter ?? 0
        /// The export's entries the circle holds.
        var count: Int64 { max(0, stored - (header.first - 1)) }
        var bytes: Int64 = 0
        var created = false
        var circleMade = false
        func flush() async throws {
            guard !batch.isEmpty else { return }
            let outcomes = try await store.commit(batch)
            for (index, outcome) in outcomes.enumerated() {
                guard case .stored(let post) = outcome, post.seq == stored + 1 else {
                    throw Failure(.io, "entry \(stored + 1) was not stored again as it was (\(outcome)); circle \(header.circle) holds entries \(header.first) to \(stored) (batch entry \(index))")
                }
                stored += 1
            }
            batch.removeAll(keepingCapacity: true)
            try await committed(stored)
        }
        func create() async throws {
            guard !created else { return }
            created = true
            for item in media {
                let target = (mediaDirectory as NSString).appendingPathComponent(item.id)
                if !FileManager.default.fileExists(atPath: target) {
                    let partial = target + ".import-\(getpid())"
                    _ = unlink(partial)
                    let copied = try DataBackup.copyFile((directory as NSString).appendingPathComponent(CircleExportFormat.mediaName + "/" + item.id), to: partial, as: item.id)
                    guard copied.sha256 == item.id else {
                        _ = unlink(partial)
                        throw Failure(.corrupt, "media \(item.id)'s bytes have SHA-256 \(copied.sha256)")
                    }
                    guard rename(partial, target) == 0 else { throw Failure(.io, "cannot write \(target): \(String(cString: strerror(errno)))") }
                }
                bytes += item.size
                _ = try await store.completeUpload(
                    id: "",
                    media: MediaInfo(id: item.id, size: item.size, contentType: item.contentType, createdAt: item.createdAt),
                    uploader: uploaders[item.id] ?? header.owner
                )
            }
            if resumeAfter == nil {
                _ = try await store.createCircle(name: header.circle, owner: header.owner, isPrivate: header.private, createdAt: header.createdAt)
            }
            circleMade = true
            // A circle whose retention policy removed its first entries: the kept ones keep their
            // numbers, and the import commits them after the removed ones'.
            if stored < header.first - 1 {
                try await store.startCircle(header.circle, after: header.first - 1)
                stored = header.first - 1
            }
            for member in members {
                try await store.addMember(member.name, to: header.circle)
                if let level = member.notify { try await store.setNotificationLevel(level, of: member.name, in: header.circle) }
            }
            // Commits by the store are not held back by it: only posts through the server are.
            if header.readOnly { try await store.setReadOnly(header.circle, true, by: header.owner, at: Identity.now) }
        }
        do {
            // The uploader of each media file: the author of the first post that has it.
            try Self.lines(of: historyPath) { line throws(Failure) in
                guard case .entry(let entry)? = try? reader.read(line), entry.change == nil, let attachment = entry.attachment, uploaders[attachment] == nil else { return }
                uploaders[attachment] = entry.author
            }
            reader = CircleExportFormat.Reader()
        }
        do {
            let handle = try LineReader(path: historyPath)
            defer { handle.close() }
            while let line = try handle.next() {
                let item: CircleExportFormat.Item
                do throws(CircleExportFormat.LineError) { item = try reader.read(line) } catch { throw Failure(.corrupt, error.description) }
                switch item {
                case .header: break
                case .member(let member): members.append(member)
                case .media(let item): media.append(item)
                case .entry(let entry):
                    try await create()
                    guard entry.seq > stored else { continue }  // committed by the import that stopped
                    batch.append(entry.newPost(in: header.circle))
                    if batch.count >= batchSize { try await flush() }
                }
            }
            try await create()
            try await flush()
            // Last, once the entries they point at are there (a marker stops at the circle's
            // last entry): what tells a rerun that the import finished (``resumePoint``).
            for member in members where member.readSeq > 0 {
                _ = try await store.markRead(member.name, in: header.circle, upTo: member.readSeq)
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            let held = count > 0 ? "entries \(header.first) to \(stored)" : "none of its entries yet"
            let next =
                circleMade
                ? "; circle \(header.circle) holds \(held): run the same import again to go on after them"
                : "; the circle was not made: run the same import again"
            throw Failure(.io, "the import of \(header.circle) failed after \(count) of \(header.entries) entries: \(error)\(next)")
        }
        return Summary(circle: header.circle, entries: count, members: members.count, media: media.count, bytes: bytes, resumedAfter: resumeAfter)
    }

    /// Reads and checks `manifest.json`: every file it lists present with its size and SHA-256,
    /// no file it does not list, only plain relative paths.
    static func verify(_ directory: String) throws(Failure) -> Manifest {
        let path = (directory as NSString).appendingPathComponent(CircleExportFormat.manifestName)
        guard let data = FileManager.default.contents(atPath: path) else { throw Failure(.corrupt, "\(directory) is not a circle export: \(path) cannot be read") }
        let manifest: Manifest
        do { manifest = try JSONDecoder().decode(Manifest.self, from: data) } catch { throw Failure(.corrupt, "\(path) is not a circle export manifest: \(error)") }
        guard manifest.format == CircleExportFormat.formatName else { throw Failure(.corrupt, "\(path) is not a circle export manifest (format \"\(manifest.format.prefix(32))\")") }
        guard manifest.version == CircleExportFormat.version else {
            throw Failure(.corrupt, "\(path) is of format version \(manifest.version); this server reads version \(CircleExportFormat.version)")
        }
        guard manifest.files.contains(where: { $0.path == CircleExportFormat.historyName }) else { throw Failure(.corrupt, "\(path) lists no \(CircleExportFormat.historyName)") }
        var listed = Set<String>()
        for file in manifest.files {
            let parts = file.path.split(separator: "/", omittingEmptySubsequences: false)
            guard file.path == CircleExportFormat.historyName || (parts.count == 2 && parts[0] == "media" && !parts[1].isEmpty && parts[1] != "." && parts[1] != "..") else {
                throw Failure(.corrupt, "\(path) lists a file that is not part of an export: \"\(file.path.prefix(128))\"")
            }
            guard listed.insert(file.path).inserted else { throw Failure(.corrupt, "\(path) lists \(file.path) twice") }
            let described: DataBackup.Manifest.File
            do throws(DataBackup.Failure) { described = try DataBackup.describe((directory as NSString).appendingPathComponent(file.path), as: file.path, missing: .corrupt) } catch {
                throw Failure(error.kind == .corrupt ? .corrupt : .io, error.message)
            }
            guard described.bytes == file.bytes, described.sha256 == file.sha256 else {
                throw Failure(
                    .corrupt,
                    "checksum mismatch: \(file.path) has \(described.bytes) bytes, SHA-256 \(described.sha256); the manifest says \(file.bytes) bytes, \(file.sha256)"
                )
            }
        }
        let present: Set<String>
        do throws(DataBackup.Failure) { present = Set(try DataBackup.regularFiles(under: directory)).subtracting([CircleExportFormat.manifestName]) } catch { throw Self.failure(error) }
        if let extra = present.subtracting(listed).sorted().first { throw Failure(.corrupt, "\(directory) holds \(extra), which its manifest does not list") }
        return manifest
    }

    /// Calls `body` with each line of the file at `path` (without its newline).
    static func lines(of path: String, _ body: (ArraySlice<UInt8>) throws(Failure) -> Void) throws(Failure) {
        let reader: LineReader
        do { reader = try LineReader(path: path) } catch { throw Failure(.io, "cannot read \(path): \(error)") }
        defer { reader.close() }
        while let line = try reader.next() {
            try body(line)
        }
    }

    private static func failure(_ error: DataBackup.Failure) -> Failure {
        switch error.kind {
        case .refused: Failure(.local, error.message)
        case .io: Failure(.io, error.message)
        case .corrupt: Failure(.corrupt, error.message)
        }
    }
}

/// A file written a line at a time, synced when closed.
private final class LineFile {
    let path: String
    private var fd: Int32

    init(creating path: String) throws(CircleTransfer.Failure) {
        self.path = path
        self.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard self.fd >= 0 else { throw CircleTransfer.Failure(.io, "cannot write \(path): \(String(cString: strerror(errno)))") }
    }

    func append(_ data: Data) throws(CircleTransfer.Failure) {
        let failed = data.withUnsafeBytes { raw -> Int32? in
            var offset = 0
            while offset < raw.count {
                let written = systemWrite(self.fd, raw.baseAddress! + offset, raw.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += written
            }
            return nil
        }
        if let failed {
            throw CircleTransfer.Failure(.io, "cannot write \(self.path): \(String(cString: strerror(failed)))\(failed == ENOSPC ? " (the disk is full)" : "")")
        }
    }

    /// Appends the whole file at `source`.
    func copy(from source: String) throws(CircleTransfer.Failure) {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw CircleTransfer.Failure(.io, "cannot read \(source): \(String(cString: strerror(errno)))") }
        defer { systemClose(input) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw CircleTransfer.Failure(.io, "cannot read \(source): \(String(cString: strerror(errno)))")
            }
            if count == 0 { return }
            try self.append(Data(buffer[0..<count]))
        }
    }

    func close() throws(CircleTransfer.Failure) {
        guard self.fd >= 0 else { return }
        defer {
            systemClose(self.fd)
            self.fd = -1
        }
        guard fsync(self.fd) == 0 else { throw CircleTransfer.Failure(.io, "cannot write \(self.path): \(String(cString: strerror(errno)))") }
    }
}

/// Reads a file a line at a time with a bounded buffer: a line longer than
/// ``CircleExportFormat/Limits/maxLineBytes`` is refused with its number.
final class LineReader {
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var start = 0
    private var ended = false
    private var number = 0

    init(path: String) throws(CircleTransfer.Failure) {
        self.fd = open(path, O_RDONLY | O_CLOEXEC)
        guard self.fd >= 0 else { throw CircleTransfer.Failure(.io, "cannot read \(path): \(String(cString: strerror(errno)))") }
    }

    func close() { systemClose(self.fd) }

    /// The next line without its newline; `nil` at the end (a last line without a newline counts).
    func next() throws(CircleTransfer.Failure) -> ArraySlice<UInt8>? {
        while true {
            if let newline = self.buffer[self.start...].firstIndex(of: 0x0A) {
                let line = self.buffer[self.start..<newline]
                self.start = newline + 1
                self.number += 1
                return line
            }
            if self.ended {
                guard self.start < self.buffer.count else { return nil }
                let line = self.buffer[self.start...]
                self.start = self.buffer.count
                self.number += 1
                return line
            }
            guard self.buffer.count - self.start <= CircleExportFormat.Limits.maxLineBytes else {
                throw CircleTransfer.Failure(.corrupt, "\(CircleExportFormat.historyName) line \(self.number + 1): longer than \(CircleExportFormat.Limits.maxLineBytes) bytes")
            }
            if self.start > 0 {
                self.buffer.removeFirst(self.start)
                self.start = 0
            }
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            let count = chunk.withUnsafeMutableBytes { read(self.fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw CircleTransfer.Failure(.io, "read failed: \(String(cString: strerror(errno)))")
            }
            if count == 0 { self.ended = true } else { self.buffer.append(contentsOf: chunk[0..<count]) }
        }
    }
}

private func systemWrite(_ fd: Int32, _ pointer: UnsafeRawPointer, _ count: Int) -> Int { write(fd, pointer, count) }
private func systemClose(_ fd: Int32) { _ = close(fd) }

extension CircleTransfer {
    /// Where `circle export` and `circle import` find the store: the data directory's SQLite
    /// database, or PostgreSQL.
    public enum StoreAccess: Sendable {
        /// Reads only (export): beside a running server.
        case read
        /// Writes (import): on SQLite it takes the data directory's lock, so the server must be
        /// stopped (a server keeps what it knows of circles in memory); on PostgreSQL nodes may run.
        case write
    }

    /// Opens the store of `dataDirectory` (or PostgreSQL at `postgresURL`), runs `body` and
    /// closes it. Throws ``Failure`` (`.local` when there is no database, `.inUse` when the data directory
    /// is in use, `.io` when the store cannot be opened), or what `body` throws.
    public static func withStore<T: Sendable>(
        dataDirectory: String, postgresURL: String?, access: StoreAccess, logger: Logger, _ body: @Sendable (any CircleStore) async throws -> T
    ) async throws -> T {
        if let postgresURL {
            let store: PostgresStore
            do {
                store = try PostgresStore(url: postgresURL, logger: logger)
            } catch let error as PostgresStore.ConfigurationError {
                throw Failure(.local, "--postgres: \(error.message)")
            }
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await store.run() }
                defer { group.cancelAll() }
                do {
                    try await store.checkConnection()
                    if access == .write { try await store.migrate() }
                } catch {
                    throw Failure(.io, "PostgreSQL at \(store.configuration.redacted) cannot be used: \(error)")
                }
                return try await body(store)
            }
        }
        let database = (dataDirectory as NSString).appendingPathComponent(DataBackup.databaseName)
        guard FileManager.default.fileExists(atPath: database) else {
            throw Failure(.local, "\(dataDirectory) holds no Circle database (\(database) does not exist); start circle serve on it once, or give --postgres")
        }
        var lock: DataDirectoryLock?
        if access == .write {
            do throws(DataDirectoryError) { lock = try DataDirectoryLock.acquire(directory: dataDirectory, logger: logger) } catch {
                throw Failure(.inUse, "the data directory \(dataDirectory) is in use (\(error.holder?.description ?? "another process")): stop the server first — an import on SQLite runs while no server does")
            }
        }
        defer { lock?.release() }
        let store: SQLiteStore
        do {
            store = try await SQLiteStore.open(path: database, logger: logger)
            if access == .write { try await store.migrate() }
        } catch {
            throw Failure(.io, "cannot open \(database): \(error)")
        }
        do {
            let result = try await body(store)
            try? await store.close()
            return result
        } catch {
            try? await store.close()
            throw error
        }
    }
}
