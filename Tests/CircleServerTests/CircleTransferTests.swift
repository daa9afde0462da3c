import CircleWire
import Crypto
import Foundation
import Testing

@testable import CircleServer

/// Export and import of one circle (``CircleTransfer``, docs/OPERATIONS.md): a round trip from
/// one store to another keeps every entry, member and media byte; a damaged or unfit export is
/// refused with a clear error and nothing written.
@Suite struct CircleTransferTests {
    /// One direction of a round trip: the store exported from and the one imported into.
    struct Pair: Sendable, CustomTestStringConvertible {
        var source: StoreKind
        var target: StoreKind
        var testDescription: String { "\(self.source.rawValue) → \(self.target.rawValue)" }
    }

    static let pairs = [Pair(source: .sqlite, target: .sqlite), Pair(source: .sqlite, target: .postgres), Pair(source: .postgres, target: .sqlite)]

    let contract = StoreContractTests()

    func temporaryDirectory(_ label: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("circle-transfer-\(label)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A source and a target data directory, and where an export of `team` goes.
    struct Directories {
        var source: String
        var target: String
        var export: String

        init(_ tests: CircleTransferTests) throws {
            self.source = try tests.temporaryDirectory("source")
            self.target = try tests.temporaryDirectory("target")
            self.export = try tests.temporaryDirectory("export") + "/team"
        }

        func remove() {
            for path in [self.source, self.target, (self.export as NSString).deletingLastPathComponent] { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    static let photo: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array("a tiny png body".utf8)
    static var photoID: String { SHA256.hash(data: Self.photo).map { String(format: "%02x", $0) }.joined() }

    func account(_ store: any CircleStore, _ name: String) async throws {
        _ = try await store.createAccount(Account(name: name, createdAt: 1), passwordHash: nil, invite: nil, now: 1)
    }

    /// A circle with posts, an edit, a reply, reactions (one taken back), a deleted post with an
    /// edit before it, a photo, a mention, a read marker, a notification level, read-only.
    func fill(_ store: any CircleStore, data: String) async throws {
        for name in ["ann", "ben", "cat"] { try await self.account(store, name) }
        _ = try await store.createCircle(name: "team", owner: "ann", isPrivate: true, createdAt: 5)
        try await store.addMember("ben", to: "team")
        try await store.addMember("cat", to: "team")
        try FileManager.default.createDirectory(atPath: data + "/media", withIntermediateDirectories: true)
        try Data(Self.photo).write(to: URL(fileURLWithPath: data + "/media/" + Self.photoID))
        _ = try await store.completeUpload(id: "", media: MediaInfo(id: Self.photoID, size: Int64(Self.photo.count), contentType: "image/png", createdAt: 7), uploader: "ben")
        let t: Int64 = 1_700_000_000_000
        let entries = [
            NewPost(circle: "team", author: "ann", clientID: "a1", text: "hello @ben", attachment: nil, time: t),
            NewPost(circle: "team", author: "ben", clientID: "b1", text: "a photo", attachment: Self.photoID, time: t + 1, replyTo: 1),
            NewPost(circle: "team", author: "ann", clientID: "a2", text: "hello @ben, edited", attachment: nil, time: t + 2, change: .edit, target: 1),
            NewPost(circle: "team", author: "cat", clientID: "c1", text: nil, attachment: nil, time: t + 3, change: .react, target: 2, emoji: "👍"),
            NewPost(circle: "team", author: "ben", clientID: "b2", text: nil, attachment: nil, time: t + 4, change: .react, target: 2, emoji: "🎉"),
            NewPost(circle: "team", author: "ben", clientID: "b3", text: nil, attachment: nil, time: t + 5, change: .unreact, target: 2, emoji: "🎉"),
            NewPost(circle: "team", author: "cat", clientID: "c2", text: "oops", attachment: nil, time: t + 6),
            NewPost(circle: "team", author: "cat", clientID: "c3", text: "oops!", attachment: nil, time: t + 7, change: .edit, target: 7),
            NewPost(circle: "team", author: "cat", clientID: "c4", text: nil, attachment: nil, time: t + 8, change: .delete, target: 7),
            NewPost(circle: "team", author: "ann", clientID: "a3", text: "last", attachment: nil, time: t + 9),
            // System entries: dan added, then removed (the member lines end without him).
            NewPost(circle: "team", author: "ann", clientID: "s1", text: nil, attachment: nil, time: t + 10, event: .added, member: "dan"),
            NewPost(circle: "team", author: "ann", clientID: "s2", text: nil, attachment: nil, time: t + 11, event: .removed, member: "dan"),
        ]
        let outcomes = try await store.commit(entries)
        #expect(self.contract.storedSeqs(outcomes) == Array(1...12).map { Int64($0) })
        _ = try await store.markRead("ben", in: "team", upTo: 4)
        try await store.setNotificationLevel(.mentions, of: "cat", in: "team")
        try await store.setReadOnly("team", true, by: "ann", at: 9)
    }

    /// Everything a reader can learn of the circle in `store`.
    func snapshot(_ store: any CircleStore) async throws -> [String] {
        var lines: [String] = []
        let circle = try #require(try await store.circle(named: "team"))
        lines.append("circle \(circle.owner) \(circle.isPrivate) \(circle.createdAt) \(circle.lastSeq)")
        lines.append("readOnly \(try await store.readOnlyCircles().contains("team"))")
        for member in try await store.members(of: "team") {
            let view = try #require(try await store.circles(visibleTo: member, named: "team").first)
            lines.append("member \(member) read \(view.readSeq) unread \(view.unread) mentions \(view.mentions) notify \(String(describing: view.notify))")
        }
        for post in try await store.posts(in: "team", after: 0, limit: 100) { lines.append("entry \(post)") }
        for post in try await store.history(in: "team", before: nil, after: nil, limit: 100, viewer: "ben") { lines.append("history \(post)") }
        lines.append("uploader \(try await store.isUploader("ben", of: Self.photoID))")
        lines.append("media \(String(describing: try await store.media(id: Self.photoID)))")
        return lines
    }

    @Test(arguments: Self.pairs) func aRoundTripKeepsEveryEntryMemberAndMediaByte(_ pair: Pair) async throws {
        let directories = try Directories(self)
        defer { directories.remove() }
        let (sourceData, targetData, export) = (directories.source, directories.target, directories.export)
        let before = try await self.contract.withStore(pair.source) { store in
            try await self.fill(store, data: sourceData)
            let summary = try await CircleTransfer.export(circle: "team", store: store, dataDirectory: sourceData, to: export)
            #expect(summary.entries == 12 && summary.members == 3 && summary.media == 1)
            return try await self.snapshot(store)
        }
        // The header names the format, its version, the circle and the counts.
        let history = try String(contentsOfFile: export + "/circle.jsonl", encoding: .utf8)
        let header = try JSONDecoder().decode(CircleExportFormat.Header.self, from: Data(history.split(separator: "\n")[0].utf8))
        #expect(header.format == "circle-export" && header.version == 1 && header.circle == "team" && header.entries == 12 && header.members == 3 && header.media == 1)
        let lineCount = history.split(separator: "\n").count
        #expect(lineCount == 17, "a header, 3 members, 1 photo, 12 entries")
        #expect(history.contains(#""event":"removed""#) && history.contains(#""member":"dan""#))
        let after = try await self.contract.withStore(pair.target) { store in
            for name in ["ann", "ben", "cat"] { try await self.account(store, name) }
            // A subscription to everything: the imported entries happened long ago elsewhere and
            // are not delivered (nor pushed); what is posted after the import is.
            let everything = Webhook(
                id: "everything", url: "https://hooks.example.com/", circle: nil, events: Set(WebhookEvent.allCases), secrets: ["whsec_x"],
                createdBy: "ann", createdAt: 1
            )
            try await store.createWebhook(everything)
            let summary = try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: targetData)
            #expect(summary.entries == 12 && summary.members == 3 && summary.media == 1)
            #expect(try await store.deliveries(of: "everything", limit: 100).isEmpty, "imported entries were queued for a webhook")
            let snapshot = try await self.snapshot(store)
            // The imported circle goes on like any other: the next entry is seq 13.
            let next = try await store.commit([NewPost(circle: "team", author: "ann", clientID: "a4", text: "after", attachment: nil, time: 1_800_000_000_000)])
            #expect(self.contract.storedSeqs(next) == [13])
            #expect(try await store.deliveries(of: "everything", limit: 100).map(\.seq) == [13])
            return snapshot
        }
        #expect(after == before)
        #expect(try Data(contentsOf: URL(fileURLWithPath: targetData + "/media/" + Self.photoID)) == Data(Self.photo))
    }

    struct Stop: Error, CustomStringConvertible {
        var description: String { "the disk is full (a test's stop)" }
    }

    /// An import that stops midway (here after its first batch of 5, as a full disk or a killed
    /// process would stop it) leaves entries 1…5 and says so; the same import run again goes on
    /// after them, and the circle is then what the source had; a third run is a conflict.
    @Test(arguments: [StoreKind.sqlite, .postgres]) func anImportThatStoppedGoesOnWhereItStopped(_ kind: StoreKind) async throws {
        let directories = try Directories(self)
        defer { directories.remove() }
        let (sourceData, targetData, export) = (directories.source, directories.target, directories.export)
        let before = try await self.contract.withStore(.sqlite) { store in
            try await self.fill(store, data: sourceData)
            _ = try await CircleTransfer.export(circle: "team", store: store, dataDirectory: sourceData, to: export)
            return try await self.snapshot(store)
        }
        try await self.contract.withStore(kind) { store in
            for name in ["ann", "ben", "cat"] { try await self.account(store, name) }
            let failure = try await #require(throws: CircleTransfer.Failure.self) {
                try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: targetData, batchSize: 5) { stored in
                    if stored >= 5 { throw Stop() }
                }
            }
            #expect(failure.kind == .io)
            #expect(
                failure.message
                    == "the import of team failed after 5 of 12 entries: the disk is full (a test's stop); circle team holds entries 1 to 5: run the same import again to go on after them"
            )
            #expect(try await store.posts(in: "team", after: 0, limit: 100).map(\.seq) == [1, 2, 3, 4, 5])

            let resumed = try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: targetData)
            #expect(resumed.resumedAfter == 5)
            #expect(resumed.entries == 12 && resumed.members == 3 && resumed.media == 1)
            #expect(try await self.snapshot(store) == before)

            // Finished: the same import again is the conflict of a circle that exists.
            let again = try await #require(throws: CircleTransfer.Failure.self) {
                try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: targetData)
            }
            #expect(again.kind == .conflict)
            #expect(try await self.snapshot(store) == before)
        }
    }

    /// A circle with the export's owner, privacy and creation time is still a conflict when its
    /// entries are not the export's first ones, or it has more.
    @Test func aCircleThatIsNotAStoppedImportIsAConflict() async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        let data = try self.temporaryDirectory("target")
        defer { try? FileManager.default.removeItem(atPath: data) }
        try await self.contract.withStore(.sqlite) { store in
            for name in ["ann", "ben", "cat"] { try await self.account(store, name) }
            _ = try await store.createCircle(name: "team", owner: "ann", isPrivate: true, createdAt: 5)
            // Entry 1 as the export has it but for its request id.
            _ = try await store.commit([NewPost(circle: "team", author: "ann", clientID: "other", text: "hello @ben", attachment: nil, time: 1_700_000_000_000)])
            let failure = try await #require(throws: CircleTransfer.Failure.self) {
                try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: data)
            }
            #expect(failure.kind == .conflict)
            #expect(failure.message == "circle \"team\" exists on this server; nothing was imported")
            #expect(try await store.posts(in: "team", after: 0, limit: 100).map(\.id) == ["other"])
        }
    }

    /// Exports `team` from a filled SQLite store; returns the export's directory.
    func exported() async throws -> String {
        let data = try self.temporaryDirectory("source")
        defer { try? FileManager.default.removeItem(atPath: data) }
        let export = try self.temporaryDirectory("export") + "/team"
        try await self.contract.withStore(.sqlite) { store in
            try await self.fill(store, data: data)
            _ = try await CircleTransfer.export(circle: "team", store: store, dataDirectory: data, to: export)
        }
        return export
    }

    /// A circle whose retention policy removed its first entries (here 1 and 2: the post an edit
    /// names, the photo post that replies to it and that reactions name) is exported from its
    /// oldest kept entry; the import numbers the circle on from there, keeps the changes whose
    /// post is gone as the records they are, and ends with what the source had, also when it
    /// stopped midway and was run again.
    @Test(arguments: Self.pairs) func aCircleTrimmedByRetentionGoesAcrossWithItsNumbers(_ pair: Pair) async throws {
        let directories = try Directories(self)
        defer { directories.remove() }
        let (sourceData, targetData, export) = (directories.source, directories.target, directories.export)
        let before = try await self.contract.withStore(pair.source) { store in
            try await self.fill(store, data: sourceData)
            #expect(try await store.trimEntries(in: "team", through: 2).entries == 2)
            let summary = try await CircleTransfer.export(circle: "team", store: store, dataDirectory: sourceData, to: export)
            #expect(summary.entries == 10 && summary.media == 0)
            return try await self.snapshot(store)
        }
        let history = try String(contentsOfFile: export + "/circle.jsonl", encoding: .utf8)
        let header = try JSONDecoder().decode(CircleExportFormat.Header.self, from: Data(history.split(separator: "\n")[0].utf8))
        #expect(header.firstSeq == 3 && header.entries == 10 && header.last == 12)
        let after = try await self.contract.withStore(pair.target) { store in
            for name in ["ann", "ben", "cat"] { try await self.account(store, name) }
            let failure = try await #require(throws: CircleTransfer.Failure.self) {
                try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: targetData, batchSize: 5) { stored in
                    if stored >= 7 { throw Stop() }
                }
            }
            #expect(
                failure.message
                    == "the import of team failed after 5 of 10 entries: the disk is full (a test's stop); circle team holds entries 3 to 7: run the same import again to go on after them"
            )
            let summary = try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: targetData)
            #expect(summary.resumedAfter == 7 && summary.entries == 10)
            let snapshot = try await self.snapshot(store)
            let next = try await store.commit([NewPost(circle: "team", author: "ann", clientID: "a4", text: "after", attachment: nil, time: 1_800_000_000_000)])
            #expect(self.contract.storedSeqs(next) == [13])
            return snapshot
        }
        #expect(after == before)
    }

    /// A circle that kept none of its entries begins after its last one on the target too.
    @Test func aCircleThatKeptNoEntryGoesOnAfterItsLast() async throws {
        let data = try self.temporaryDirectory("source")
        let export = try self.temporaryDirectory("export") + "/team"
        defer { for path in [data, (export as NSString).deletingLastPathComponent] { try? FileManager.default.removeItem(atPath: path) } }
        try await self.contract.withStore(.sqlite) { store in
            try await self.fill(store, data: data)
            #expect(try await store.trimEntries(in: "team", through: 12).entries == 12)
            let summary = try await CircleTransfer.export(circle: "team", store: store, dataDirectory: data, to: export)
            #expect(summary.entries == 0)
        }
        try await self.contract.withStore(.postgres) { store in
            for name in ["ann", "ben", "cat"] { try await self.account(store, name) }
            let summary = try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: data)
            #expect(summary.entries == 0 && summary.resumedAfter == nil)
            #expect(try await store.circle(named: "team")?.lastSeq == 12)
            let next = try await store.commit([NewPost(circle: "team", author: "ann", clientID: "a4", text: "after", attachment: nil, time: 1_800_000_000_000)])
            #expect(self.contract.storedSeqs(next) == [13])
        }
    }

    /// Imports `export` into a fresh store of `kind` with the three accounts; the failure, and
    /// whether the store then holds the circle or any media row.
    func importFailure(_ export: String, kind: StoreKind = .sqlite, accounts: [String] = ["ann", "ben", "cat"], existing: Bool = false) async throws -> CircleTransfer.Failure {
        let data = try self.temporaryDirectory("target")
        defer { try? FileManager.default.removeItem(atPath: data) }
        return try await self.contract.withStore(kind) { store in
            for name in accounts { try await self.account(store, name) }
            if existing { _ = try await store.createCircle(name: "team", owner: "zed", isPrivate: false, createdAt: 1) }
            let failure = try await #require(throws: CircleTransfer.Failure.self) {
                try await CircleTransfer.importCircle(from: export, store: store, dataDirectory: data)
            }
            // Nothing written.
            if !existing { #expect(try await store.circle(named: "team") == nil) }
            #expect(try await store.media(id: Self.photoID) == nil)
            #expect(!FileManager.default.fileExists(atPath: data + "/media/" + Self.photoID))
            return failure
        }
    }

    /// Rewrites line `number` (from 1) of the export's history and fixes the manifest's checksum.
    func rewrite(_ export: String, line number: Int, fixManifest: Bool = true, _ change: (String) -> String) throws {
        let path = export + "/circle.jsonl"
        var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        lines[number - 1] = change(lines[number - 1])
        let data = Data(lines.joined(separator: "\n").utf8)
        try data.write(to: URL(fileURLWithPath: path))
        guard fixManifest else { return }
        var manifest = try JSONDecoder().decode(CircleTransfer.Manifest.self, from: Data(contentsOf: URL(fileURLWithPath: export + "/manifest.json")))
        let index = try #require(manifest.files.firstIndex { $0.path == "circle.jsonl" })
        manifest.files[index].bytes = Int64(data.count)
        manifest.files[index].sha256 = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
        try JSONEncoder().encode(manifest).write(to: URL(fileURLWithPath: export + "/manifest.json"))
    }

    @Test(arguments: [StoreKind.sqlite, .postgres]) func anExistingCircleIsAConflict(_ kind: StoreKind) async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        let failure = try await self.importFailure(export, kind: kind, existing: true)
        #expect(failure.kind == .conflict)
        #expect(failure.message == "circle \"team\" exists on this server; nothing was imported")
    }

    @Test(arguments: [StoreKind.sqlite, .postgres]) func peopleWithoutAnAccountAreRefused(_ kind: StoreKind) async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        let failure = try await self.importFailure(export, kind: kind, accounts: ["ann"])
        #expect(failure.kind == .refused)
        #expect(failure.message == "2 people named in the export have no account here (ben, cat); create them first; nothing was imported")
    }

    @Test func badJSONIsRefusedWithItsLine() async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        try self.rewrite(export, line: 7) { String($0.dropLast()) }
        let failure = try await self.importFailure(export)
        #expect(failure.kind == .corrupt)
        #expect(failure.message == "circle.jsonl line 7: bad JSON: not JSON")
    }

    @Test func aChecksumMismatchIsRefused() async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        try self.rewrite(export, line: 15, fixManifest: false) { $0.replacingOccurrences(of: "last", with: "LAST") }
        let failure = try await self.importFailure(export)
        #expect(failure.kind == .corrupt)
        #expect(failure.message.hasPrefix("checksum mismatch: circle.jsonl has "))
        // A changed photo too.
        let photo = try #require(FileManager.default.contentsOfDirectory(atPath: export + "/media").first)
        try Data("not the photo".utf8).write(to: URL(fileURLWithPath: export + "/media/" + photo))
        #expect(try await self.importFailure(export).message.hasPrefix("checksum mismatch: "))
    }

    @Test func seqsOutOfOrderAreRefusedWithTheLine() async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        // Line 6 is entry 1 (header, three members, one photo).
        try self.rewrite(export, line: 8) { $0.replacingOccurrences(of: "\"seq\":3", with: "\"seq\":4") }
        let failure = try await self.importFailure(export)
        #expect(failure.message == "circle.jsonl line 8: seq 4 out of order: 3 was expected")
    }

    @Test func anUnknownFormatVersionIsRefused() async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        try self.rewrite(export, line: 1) { $0.replacingOccurrences(of: "\"version\":1", with: "\"version\":2") }
        let failure = try await self.importFailure(export)
        #expect(failure.message == "circle.jsonl line 1: format version 2 is not one this server reads (it reads 1)")
    }

    @Test func aChangeOfADeletedPostIsRefused() async throws {
        let export = try await self.exported()
        defer { try? FileManager.default.removeItem(atPath: (export as NSString).deletingLastPathComponent) }
        // Entry 10 (line 15) becomes a reaction to post 7, deleted by entry 9.
        try self.rewrite(export, line: 15) { $0.replacingOccurrences(of: "\"text\":\"last\"", with: "\"change\":\"react\",\"emoji\":\"x\",\"target\":7") }
        let failure = try await self.importFailure(export)
        #expect(failure.message == "circle.jsonl line 15: react of post 7, deleted before")
    }

    @Test func theReaderRefusesEachBrokenRuleWithItsLine() throws {
        func check(_ lines: [String]) -> String? {
            var reader = CircleExportFormat.Reader()
            do {
                for line in lines { _ = try reader.read(Array(line.utf8)) }
                try reader.finish()
                return nil
            } catch {
                return String(describing: error)
            }
        }
        let header = #"{"format":"circle-export","version":1,"circle":"c","owner":"ann","private":false,"createdAt":1,"readOnly":false,"members":1,"media":0,"entries":2,"circleVersion":"0","exportedAt":1}"#
        let member = #"{"type":"member","name":"ann","readSeq":0}"#
        let post = #"{"type":"entry","seq":1,"author":"ann","id":"x","time":1,"text":"hi","deleted":false,"mentionsEveryone":false}"#
        let edit = #"{"type":"entry","seq":2,"author":"ann","id":"y","time":2,"text":"ho","change":"edit","target":1,"deleted":false,"mentionsEveryone":false}"#
        #expect(check([header, member, post, edit]) == nil)
        #expect(check([header, member, post]) == "circle.jsonl line 3: the file ends early: the header announces 1 members, 0 media and 2 entries; there are 1, 0 and 1")
        #expect(check([header, post]) == #"circle.jsonl line 2: a "member" line was expected here, not "entry""#)
        #expect(check([header, member, edit]) == "circle.jsonl line 3: seq 2 out of order: 1 was expected")
        #expect(check([header, member, post, edit, post]) == "circle.jsonl line 5: a line after the 2 entries the header announces")
        #expect(check([header, member, post, edit.replacingOccurrences(of: "\"target\":1", with: "\"target\":2")]) == "circle.jsonl line 4: target 2 is not an earlier post")
        #expect(check([header, member, post.replacingOccurrences(of: "\"text\":\"hi\"", with: "\"attachment\":\"ab\"")]) == "circle.jsonl line 3: attachment ab is not among the media lines")
        #expect(check([header.replacingOccurrences(of: "\"circle\":\"c\"", with: "\"circle\":\"C D\"")]) == #"circle.jsonl line 1: "C D" is not a valid circle name"#)
        #expect(check([#"{"hello":1}"#]) == #"circle.jsonl line 1: not a circle-export header: no "format""#)
        #expect(check([]) == "circle.jsonl line 1: the file is empty")
        // A circle whose retention policy removed entries 1…9: its entries begin at 10, and a
        // change or reply may name a removed post (before 10), never a later one.
        let trimmed = header.replacingOccurrences(of: "\"entries\":2", with: "\"entries\":2,\"firstSeq\":10")
        let kept = post.replacingOccurrences(of: "\"seq\":1", with: "\"seq\":10")
        let editOfRemoved = edit.replacingOccurrences(of: "\"seq\":2", with: "\"seq\":11").replacingOccurrences(of: "\"target\":1", with: "\"target\":4")
        #expect(check([trimmed, member, kept, editOfRemoved]) == nil)
        #expect(check([trimmed, member, kept, editOfRemoved.replacingOccurrences(of: "\"target\":4", with: "\"target\":10")]) == nil)
        #expect(check([trimmed, member, post]) == "circle.jsonl line 3: seq 1 out of order: 10 was expected")
        #expect(
            check([trimmed, member, kept, editOfRemoved.replacingOccurrences(of: "\"target\":4", with: "\"target\":11")])
                == "circle.jsonl line 4: target 11 is not an earlier post"
        )
        #expect(
            check([trimmed.replacingOccurrences(of: "\"firstSeq\":10", with: "\"firstSeq\":0")])
                == "circle.jsonl line 1: firstSeq 0 is out of range (1 to \(Int64.max - CircleExportFormat.Limits.maxEntries))"
        )
        #expect(check([trimmed, member.replacingOccurrences(of: "\"readSeq\":0", with: "\"readSeq\":12"), kept, editOfRemoved]) == "circle.jsonl line 2: readSeq 12 is outside 0…11")
    }
}
